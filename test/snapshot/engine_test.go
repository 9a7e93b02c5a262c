package snapshot

import (
	"context"
	"os"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/test/driver"
)

// writeBlocks writes a 16 MiB pattern at each offset of a published block
// volume and syncs.
func writeBlocks(t testing.TB, v *vol, offsets []int64) {
	t.Helper()
	f, err := os.OpenFile(v.target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, off := range offsets {
		if _, err := f.WriteAt(pattern(uint64(100+i), 16<<20), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func checkBlocks(t testing.TB, v *vol, offsets []int64) {
	t.Helper()
	f, err := os.Open(v.target)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 16<<20)
	for i, off := range offsets {
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		if sha(b) != sha(pattern(uint64(100+i), 16<<20)) {
			t.Errorf("%s: 16 MiB at %d differ", v.name, off)
		}
	}
}

func allocatedBytes(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func poolFree(t testing.TB, d *driver.Driver) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(d.PoolDir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

var spread = []int64{0, 300 << 20, 1 << 30, 2<<30 - 16<<20}

// TestCopyEngineKeepsHoles: on ext4 the snapshot and the restore are copies
// of what was written (64 MiB), not of the 2 GiB volume.
func TestCopyEngineKeepsHoles(t *testing.T) {
	d := startOn(t, poolExt4, 8<<30)
	v := create(t, d, "sparse", 2<<30, driver.BlockCap(), nil, nil)
	up(t, d, v)
	writeBlocks(t, v, spread)
	snap := snapshot(t, d, "snap", v.id)
	if rec, _ := d.Pool.GetSnapshot(snap.GetSnapshotId()); rec.Engine != volume.EngineCopy {
		t.Fatalf("engine %q on ext4, want copy", rec.Engine)
	}
	for _, path := range []string{d.Pool.SnapshotImagePath(snap.GetSnapshotId())} {
		if got := allocatedBytes(t, path); got < 64<<20 || got > 72<<20 {
			t.Errorf("%s allocates %d bytes for 64 MiB written into 2 GiB", path, got)
		}
	}
	r := create(t, d, "restored", 2<<30, driver.BlockCap(), nil, fromSnapshot(snap.GetSnapshotId()))
	if got := allocatedBytes(t, d.Pool.ImagePath(r.id)); got < 64<<20 || got > 72<<20 {
		t.Errorf("restore allocates %d bytes for 64 MiB of data", got)
	}
	up(t, d, r)
	checkBlocks(t, r, spread)
	down(t, d, r)
	down(t, d, v)
}

// TestReflinkSharesExtents: on xfs (reflink) a snapshot of 256 MiB of data
// takes no data space, and a thick volume's shared bytes are no longer
// promised by GetCapacity (they need room again when rewritten).
func TestReflinkSharesExtents(t *testing.T) {
	ctx := context.Background()
	d := startOn(t, poolXFS, 8<<30)
	thick := map[string]string{"provisioning": "thick"}
	v := create(t, d, "thick", 1<<30, driver.BlockCap(), thick, nil)
	up(t, d, v)
	offsets := []int64{0, 16 << 20, 32 << 20, 48 << 20, 512 << 20, 528 << 20, 544 << 20, 560 << 20, 576 << 20, 592 << 20, 608 << 20, 624 << 20, 640 << 20, 656 << 20, 672 << 20, 688 << 20}
	writeBlocks(t, v, offsets) // 256 MiB
	capReq := &csipb.GetCapacityRequest{}
	c0, err := d.Controller.GetCapacity(ctx, capReq)
	if err != nil {
		t.Fatal(err)
	}
	free0 := poolFree(t, d)
	snap := snapshot(t, d, "snap", v.id)
	if rec, _ := d.Pool.GetSnapshot(snap.GetSnapshotId()); rec.Engine != volume.EngineReflink {
		t.Fatalf("engine %q on xfs with reflink, want reflink", rec.Engine)
	}
	if used := free0 - poolFree(t, d); used > 8<<20 {
		t.Errorf("a reflink snapshot of 256 MiB used %d bytes of the pool", used)
	}
	c1, err := d.Controller.GetCapacity(ctx, capReq)
	if err != nil {
		t.Fatal(err)
	}
	if drop := c0.GetAvailableCapacity() - c1.GetAvailableCapacity(); drop < 248<<20 || drop > 264<<20 {
		t.Errorf("GetCapacity dropped by %d bytes after sharing 256 MiB of a thick volume, want ~256 MiB", drop)
	}
	r := create(t, d, "restored", 1<<30, driver.BlockCap(), nil, fromSnapshot(snap.GetSnapshotId()))
	up(t, d, r)
	checkBlocks(t, r, offsets)
	down(t, d, r)
	if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: r.id}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	// xfs frees a deleted file's extents in the background (inodegc):
	// until then the thick volume's still read as shared.
	var c2 *csipb.GetCapacityResponse
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c2, err = d.Controller.GetCapacity(ctx, capReq); err != nil {
			t.Fatal(err)
		}
		diff := c0.GetAvailableCapacity() - c2.GetAvailableCapacity()
		if diff >= -8<<20 && diff <= 8<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("GetCapacity %d after the snapshot was deleted, %d before it was taken", c2.GetAvailableCapacity(), c0.GetAvailableCapacity())
			break
		}
	}
	down(t, d, v)
}
