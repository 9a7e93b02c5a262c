//go:build e2e

package multinode

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// classDir: the GlusterFS release's directory class (values.yaml), on the btrfs run.sh
// mounts at the same path on every node.
const classDir = "filevol-dir"

var allNodes = []string{"vm", "n2", "n3"}

// One ReadWriteMany directory claim, a pod on each of the three nodes, all writing at
// once: each waits until all three are up, writes 8 MiB of its own with its checksum,
// then checks the other two's files against their checksums. Writing past the claim's
// 64 MiB fails with EDQUOT (the claim's btrfs qgroup; on CephFS its quota) from every
// node. Deleting the claim deletes its directory. On both shared backends at once.
func TestDirectoryClaimFromThreeNodes(t *testing.T) {
	eachBackendAtOnce(t, directoryClaimFromThreeNodes)
}

func directoryClaimFromThreeNodes(t *testing.T, be sharedBackend) {
	dirPool := be.dirs
	ns := namespace(t)
	class := be.dirClass
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			StorageClassName: &class,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim: %v", err)
	}
	for _, n := range allNodes {
		pod(t, ns, "w-"+n, "shared", n, `me=`+n+`; touch /data/ready-$me
until [ -e /data/ready-vm ] && [ -e /data/ready-n2 ] && [ -e /data/ready-n3 ]; do sleep 0.1; done
echo "all three up"
dd if=/dev/urandom of=/data/$me bs=1M count=8 conv=fsync 2>/dev/null
sha256sum /data/$me > /data/.$me.sum && mv /data/.$me.sum /data/$me.sum
for o in vm n2 n3; do
  until [ -e /data/$o.sum ]; do sleep 0.1; done
  if sha256sum -c /data/$o.sum >/dev/null 2>&1; then echo "saw $o ok"; else echo "saw $o BAD"; fi
done
sleep 3600`, v1.RestartPolicyAlways)
	}
	for _, n := range allNodes {
		p := podRunning(t, ns, "w-"+n, 3*time.Minute)
		if p.Spec.NodeName != n {
			t.Fatalf("pod w-%s runs on %s", n, p.Spec.NodeName)
		}
	}
	for _, n := range allNodes {
		eventually(t, 2*time.Minute, "w-"+n+" checked all three files", func() (bool, error) {
			b, err := cs.CoreV1().Pods(ns).GetLogs("w-"+n, &v1.PodLogOptions{}).DoRaw(t.Context())
			return err == nil && strings.Count(string(b), "saw ") == 3, nil
		})
		log := kubectl(t.Context(), "-n", ns, "logs", "w-"+n)
		for _, o := range allNodes {
			if !strings.Contains(log, "saw "+o+" ok") {
				t.Fatalf("pod on %s: %q, want %s's file intact", n, log, o)
			}
		}
	}
	pv := claimVolume(t, ns, "shared")
	at, err := attachments(t.Context(), pv)
	if err != nil || len(at) != 3 || !at["vm"] || !at["n2"] || !at["n3"] {
		t.Fatalf("attachments of %s: %v %v, want vm, n2 and n3", pv, at, err)
	}
	// Where the claim lives in the pool: the directory that holds the three files.
	var dir string
	_ = filepath.WalkDir(dirPool, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "n3.sum" {
			dir = filepath.Dir(p)
			return filepath.SkipAll
		}
		return nil
	})
	if dir == "" {
		t.Fatalf("no directory in %s holds the claim's files", dirPool)
	}
	t.Logf("volume %s attached to 3 nodes, its directory %s", pv, dir)

	// Past the size, from each node: EDQUOT, and what was written stays readable.
	for _, n := range allNodes {
		out := kubectl(t.Context(), "-n", ns, "exec", "w-"+n, "--", "sh", "-c",
			`if dd if=/dev/zero of=/data/big-`+n+` bs=1M count=96 conv=fsync 2>/tmp/err; then echo WROTE; else cat /tmp/err; fi; rm -f /data/big-`+n+`; sync
sha256sum -c /data/n2.sum >/dev/null && echo still-ok`)
		if !strings.Contains(out, "Disk quota exceeded") || !strings.Contains(out, "still-ok") {
			t.Fatalf("96 MiB into the 64 MiB claim from %s: %q, want EDQUOT (Disk quota exceeded) and the data intact", n, out)
		}
		t.Logf("from %s: %s", n, strings.TrimSpace(strings.Split(out, "\n")[0]))
	}

	// Deleted: the pods, the claim; its volume and its directory go.
	for _, n := range allNodes {
		deletePod(t, ns, "w-"+n)
	}
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "shared", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "volume "+pv+" deleted", func() (bool, error) {
		_, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv, metav1.GetOptions{})
		return err != nil, nil
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the claim's directory %s after its volume was deleted: %v, want gone", dir, err)
	}
	eventually(t, time.Minute, "no VolumeAttachment of "+pv+" left", func() (bool, error) {
		at, err := attachments(t.Context(), pv)
		return err == nil && len(at) == 0, err
	})
}
