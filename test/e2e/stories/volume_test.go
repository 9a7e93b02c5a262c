//go:build e2e

package stories

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A user's pod writes to a claim and goes away; a new pod on the same claim
// reads exactly the same bytes.
func TestDataOutlivesThePod(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	claim(t, ns, "data", claimOpts{})
	sum := lastLine(runPod(t, ns, "writer", "data", false, `
head -c 8388608 /dev/urandom > /data/blob
echo "written by the first pod" > /data/note
sync
sha256sum /data/blob | cut -d" " -f1`))
	pv := boundVolume(t, ns, "data")
	if got := pv.Spec.NodeAffinity; got == nil || !strings.Contains(got.String(), topoKey) {
		t.Errorf("volume %s: node affinity %v does not name %s", pv.Name, got, topoKey)
	}
	out := runPod(t, ns, "reader", "data", false, `
cat /data/note
awk '$2 == "/data" {print $3}' /proc/mounts
sha256sum /data/blob | cut -d" " -f1`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "written by the first pod" || lines[1] != "ext4" || lines[2] != sum {
		t.Fatalf("second pod read %q; want the note, ext4 and sha256 %s", out, sum)
	}
}

// A raw block claim: the pod gets a device of the claimed size, and bytes
// written at an offset by one pod are read back by the next.
func TestRawBlockClaim(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	claim(t, ns, "raw", claimOpts{block: true, size: "1Gi"})
	out := runPod(t, ns, "writer", "raw", true, `
head -c 4194304 /dev/urandom > /tmp/blob
dd if=/tmp/blob of=`+devicePath+` bs=1048576 seek=16 conv=fsync 2>/dev/null
blockdev --getsize64 `+devicePath+`
sha256sum /tmp/blob | cut -d" " -f1`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("writer printed %q", out)
	}
	if lines[0] != strconv.Itoa(1<<30) {
		t.Errorf("device size %s bytes, want %d", lines[0], 1<<30)
	}
	got := lastLine(runPod(t, ns, "reader", "raw", true,
		`dd if=`+devicePath+` bs=1048576 skip=16 count=4 2>/dev/null | sha256sum | cut -d" " -f1`))
	if got != lines[1] {
		t.Fatalf("read back sha256 %s, wrote %s", got, lines[1])
	}
}

// Deleting a claim deletes its volume: the image file leaves the pool and no
// loop device is left on it.
func TestDeletedClaimLeavesNothing(t *testing.T) {
	t.Parallel()
	if poolDir == "" {
		t.Skip("FILEVOL_E2E_POOL not set")
	}
	ns := namespace(t)
	claim(t, ns, "doomed", claimOpts{size: "2Gi"})
	runPod(t, ns, "writer", "doomed", false, `echo bye > /data/x; sync`)
	pv := boundVolume(t, ns, "doomed")
	id := pv.Spec.CSI.VolumeHandle
	if files := poolFiles(t, id); len(files) == 0 {
		t.Fatalf("volume %s: nothing named after it in the pool %s", id, poolDir)
	}
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "volume "+pv.Name+" deleted", func() (bool, error) {
		_, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if files := poolFiles(t, id); len(files) != 0 {
		t.Errorf("volume %s deleted, but the pool still holds %v", id, files)
	}
	if devs := loopDevicesOn(t, id); len(devs) != 0 {
		t.Errorf("volume %s deleted, but loop devices %v still use its image", id, devs)
	}
}

// poolFiles lists every file under the pool whose name contains id.
func poolFiles(t *testing.T, id string) []string {
	t.Helper()
	return filesNamed(t, poolDir, id)
}

// filesNamed lists every file under dir whose name contains id.
func filesNamed(t *testing.T, dir, id string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.Contains(d.Name(), id) {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk pool: %v", err)
	}
	return out
}

// loopDevicesOn lists loop devices whose backing file names id (sysfs, as
// the driver itself looks them up).
func loopDevicesOn(t *testing.T, id string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), id) {
			out = append(out, strings.Split(f, "/")[3])
		}
	}
	return out
}
