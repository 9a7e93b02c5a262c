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

// writeScript fills a volume with a random blob and a note and prints the
// blob's sha256; checkScript prints the note and the sha256 it finds.
const (
	writeScript = `
head -c 8388608 /dev/urandom > /data/blob
echo original > /data/note
sync
sha256sum /data/blob | cut -d" " -f1`
	checkScript = `cat /data/note; sha256sum /data/blob | cut -d" " -f1`
)

// A snapshot taken of a claim is restored into a new claim that holds the
// data as it was at the snapshot, whatever happened to the source since.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	requireCaps(t, "controller:CREATE_DELETE_SNAPSHOT")
	ns := namespace(t)
	claim(t, ns, "src", claimOpts{})
	sum := lastLine(runPod(t, ns, "writer", "src", false, writeScript))

	snapshotOf(t, ns, "snap", "src", false)
	// The source changes after the snapshot; the restore must not see it.
	runPod(t, ns, "overwriter", "src", false, `echo changed > /data/note; rm /data/blob; sync`)

	group := "snapshot.storage.k8s.io"
	claim(t, ns, "restored", claimOpts{source: &v1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: "snap"}})
	if got, want := runPod(t, ns, "reader", "restored", false, checkScript), "original\n"+sum; strings.TrimSpace(got) != want {
		t.Fatalf("restored claim holds %q, want %q", got, want)
	}
}

// A claim cloned from another one (xfs, where the clone needs its own
// filesystem identity) is usable while the source is still mounted.
func TestCloneWhileSourceInUse(t *testing.T) {
	t.Parallel()
	requireCaps(t, "controller:CLONE_VOLUME")
	ns := namespace(t)
	claim(t, ns, "src", claimOpts{class: classXFS})
	sum := lastLine(runPod(t, ns, "writer", "src", false, writeScript))
	startPod(t, ns, "src-user", "src", false, `sleep 3600`)

	claim(t, ns, "clone", claimOpts{class: classXFS, source: &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}})
	if got, want := runPod(t, ns, "reader", "clone", false, checkScript), "original\n"+sum; strings.TrimSpace(got) != want {
		t.Fatalf("clone holds %q, want %q", got, want)
	}
	deletePod(t, ns, "src-user")
}

// A claim is expanded while its pod runs, and the pod sees the bigger
// filesystem without a restart. xfs: growing a mounted ext4 needs
// CAP_SYS_RESOURCE, which root lacks on the e2e machine.
func TestOnlineExpansion(t *testing.T) {
	t.Parallel()
	requireCaps(t, "controller:EXPAND_VOLUME", "node:EXPAND_VOLUME")
	if !advertised["plugin:ONLINE"] {
		t.Log("note: the driver does not advertise VolumeExpansion ONLINE; the design says it grows online")
	}
	ns := namespace(t)
	claim(t, ns, "grow", claimOpts{class: classXFS, size: "1Gi"})
	startPod(t, ns, "app", "grow", false, `while true; do df -k /data | awk 'NR == 2 {print $2}'; sleep 1; done`)
	var before int
	eventually(t, time.Minute, "pod reports its filesystem size", func() (bool, error) {
		n, err := count(t, ns, "app")
		before = n
		return err == nil && n > 0, nil
	})
	if before > 1<<20 {
		t.Fatalf("1Gi claim: filesystem of %d KiB", before)
	}

	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Patch(t.Context(), "grow", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("expand claim: %v", err)
	}
	want := resource.MustParse("2Gi")
	eventually(t, 3*time.Minute, "claim capacity 2Gi", func() (bool, error) {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "grow", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := pvc.Status.Capacity[v1.ResourceStorage]
		return got.Cmp(want) >= 0 && len(pvc.Status.Conditions) == 0, nil
	})
	eventually(t, time.Minute, "pod sees the bigger filesystem", func() (bool, error) {
		n, err := count(t, ns, "app")
		return err == nil && n > 3<<19, nil // > 1.5 GiB in KiB
	})
	after, _ := count(t, ns, "app")
	t.Logf("filesystem grew from %d to %d KiB while the pod ran", before, after)
	p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "app", metav1.GetOptions{})
	if err != nil || p.Status.Phase != v1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the pod did not keep running through the expansion: %v %v", err, p.Status)
	}
}
