//go:build e2e

package stories

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// classDir is values-e2e.yaml's directory class of the shared-pool driver
// (a btrfs directory pool: a subvolume and a qgroup limit per claim).
const classDir = "filevol-dir"

// A ReadWriteMany directory claim: two pods write to it at once and see
// each other's files; a write past its size fails with EDQUOT; it grows
// while they run, and then the same write fits.
func TestDirectoryClaimSharedByTwoPods(t *testing.T) {
	t.Parallel()
	if _, err := cs.StorageV1().StorageClasses().Get(t.Context(), classDir, metav1.GetOptions{}); err != nil {
		t.Skipf("no StorageClass %s (values-e2e.yaml's sharedPool.dirPool): %v", classDir, err)
	}
	ns := namespace(t)
	mode := v1.PersistentVolumeFilesystem
	class := classDir
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			VolumeMode:       &mode,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim: %v", err)
	}
	// Each pod writes its own file, then waits for the other's.
	for me, other := range map[string]string{"left": "right", "right": "left"} {
		newPod(t, ns, me, "shared", false, `echo from-`+me+` > /data/`+me+`
until [ -s /data/`+other+` ]; do sleep 0.2; done
echo "saw $(cat /data/`+other+`)"
sleep 3600`)
	}
	for me, other := range map[string]string{"left": "right", "right": "left"} {
		eventually(t, 3*time.Minute, me+" sees "+other+"'s file", func() (bool, error) {
			// Not podLog: it fails the test while the pod is still starting.
			b, err := cs.CoreV1().Pods(ns).GetLogs(me, &v1.PodLogOptions{}).DoRaw(t.Context())
			return err == nil && strings.Contains(string(b), "saw from-"+other), nil
		})
	}
	pv := boundVolumeOf(t, ns, "shared", "shared.filevol.csi.io")
	t.Logf("volume %s, written by two pods at once", pv.Spec.CSI.VolumeHandle)

	// 96 MiB into a 64 MiB claim: EDQUOT (the qgroup limit), not ENOSPC.
	const fill = `if dd if=/dev/zero of=/data/big bs=1M count=96 conv=fsync 2>/tmp/err; then echo WROTE; else cat /tmp/err; fi
rm -f /data/big; sync`
	if out := runPod(t, ns, "over", "shared", false, fill); !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("96 MiB into a 64 MiB directory claim: %q, want EDQUOT (Disk quota exceeded)", out)
	}

	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"256Mi"}}}}`)
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Patch(t.Context(), "shared", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("expand claim: %v", err)
	}
	want := resource.MustParse("256Mi")
	eventually(t, 2*time.Minute, "claim capacity 256Mi", func() (bool, error) {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "shared", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := c.Status.Capacity[v1.ResourceStorage]
		return got.Cmp(want) >= 0 && len(c.Status.Conditions) == 0, nil
	})
	if out := runPod(t, ns, "fits", "shared", false, fill); !strings.Contains(out, "WROTE") {
		t.Fatalf("96 MiB after growing the claim to 256 MiB: %q", out)
	}
	// Online: the two pods ran through it, never restarted.
	for _, name := range []string{"left", "right"} {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != v1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("pod %s did not keep running through the expansion: %v %+v", name, err, p.Status)
		}
	}
}
