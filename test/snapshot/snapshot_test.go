package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/test/driver"
)

var engineOf = map[string]string{poolXFS: volume.EngineReflink, poolExt4: volume.EngineCopy}

// TestSnapshotRestore, on both engines and every filesystem: write a known
// pattern, snapshot while mounted, overwrite, restore into a new volume
// (bigger than the source, so the filesystem must grow at stage), and
// check both checksums. The pattern is written without fsync: only the
// freeze around the clone puts it into the snapshot.
func TestSnapshotRestore(t *testing.T) {
	for _, poolFS := range []string{poolXFS, poolExt4} {
		t.Run(poolFS+"-pool", func(t *testing.T) {
			d := startOn(t, poolFS, 16<<30)
			for _, fsType := range []string{"ext4", "xfs", "btrfs"} {
				t.Run(fsType, func(t *testing.T) {
					needTools(t, "mkfs."+fsType)
					testSnapshotRestore(t, d, poolFS, fsType)
				})
			}
		})
	}
}

func testSnapshotRestore(t *testing.T, d *driver.Driver, poolFS, fsType string) {
	ctx := context.Background()
	c := driver.MountCap(fsType)
	src := create(t, d, "src-"+fsType, 512<<20, c, nil, nil)
	up(t, d, src)
	before, after := pattern(1, 8<<20), pattern(2, 8<<20)
	put(t, src, before, true)
	snap := snapshot(t, d, "snap-"+fsType, src.id)
	if snap.GetSizeBytes() != 512<<20 || snap.GetSourceVolumeId() != src.id {
		t.Errorf("snapshot %+v", snap)
	}
	if rec, err := d.Pool.GetSnapshot(snap.GetSnapshotId()); err != nil || rec.Engine != engineOf[poolFS] {
		t.Errorf("snapshot engine %q (%v), want %s on a %s pool", rec.Engine, err, engineOf[poolFS], poolFS)
	}
	if err := writeWithin(src, after, 5*time.Second); err != nil {
		t.Fatalf("source not writable after the snapshot (left frozen?): %v", err)
	}

	r := create(t, d, "restored-"+fsType, 1<<30, c, nil, fromSnapshot(snap.GetSnapshotId()))
	resp, err := d.Controller.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: r.id})
	if err != nil || resp.GetVolume().GetContentSource().GetSnapshot().GetSnapshotId() != snap.GetSnapshotId() {
		t.Errorf("restored volume's content source: %v, %v", resp.GetVolume().GetContentSource(), err)
	}
	up(t, d, r)
	if sum(t, r, len(before)) != sha(before) {
		t.Error("restored data differs from what was written before the snapshot")
	}
	if sum(t, src, len(after)) != sha(after) {
		t.Error("source data differs from what was written after the snapshot")
	}
	if total := statfsTotal(t, r.target); total < 900<<20 {
		t.Errorf("restore into 1 GiB: the %s filesystem has %d bytes; it did not grow at stage", fsType, total)
	}
	down(t, d, r)
	down(t, d, src)
	// Deleting the source leaves the snapshot whole, and the restore.
	for _, id := range []string{src.id, r.id} {
		if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatal(err)
		}
	}
	r2 := create(t, d, "restored2-"+fsType, 512<<20, c, nil, fromSnapshot(snap.GetSnapshotId()))
	up(t, d, r2)
	if sum(t, r2, len(before)) != sha(before) {
		t.Error("restore after the source was deleted differs")
	}
	down(t, d, r2)
	if _, err := d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
}

// TestCloneMountedXFS clones an XFS volume while it is mounted and mounts
// the clone beside it: same filesystem UUID, which XFS refuses without
// nouuid.
func TestCloneMountedXFS(t *testing.T) {
	needTools(t, "mkfs.xfs")
	for _, poolFS := range []string{poolXFS, poolExt4} {
		t.Run(poolFS+"-pool", func(t *testing.T) {
			ctx := context.Background()
			d := startOn(t, poolFS, 8<<30)
			c := driver.MountCap("xfs")
			src := create(t, d, "src", 512<<20, c, nil, nil)
			up(t, d, src)
			data := pattern(3, 4<<20)
			put(t, src, data, false)
			clone := create(t, d, "clone", 512<<20, c, nil, fromVolume(src.id))
			up(t, d, clone)
			if sum(t, clone, len(data)) != sha(data) {
				t.Error("clone differs from its source")
			}
			mounted := 0
			for _, m := range driver.Mounts(t, d.Dir) {
				if m.FSType == "xfs" && (m.MountPoint == src.staging || m.MountPoint == clone.staging) {
					mounted++
				}
			}
			if mounted != 2 {
				t.Errorf("%d of source and clone mounted, want both", mounted)
			}
			put(t, clone, pattern(4, 4<<20), false)
			if sum(t, src, len(data)) != sha(data) {
				t.Error("writing the clone changed its source")
			}
			down(t, d, clone)
			down(t, d, src)
			// A clone of a missing volume is NOT_FOUND (spec), one smaller
			// than its source OUT_OF_RANGE.
			_, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csipb.VolumeCapability{c},
				VolumeContentSource: fromVolume(d.Pool.VolumeID("nope"))})
			if status.Code(err) != codes.NotFound {
				t.Errorf("clone of a missing volume = %v, want NOT_FOUND", err)
			}
			_, err = d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "y", VolumeCapabilities: []*csipb.VolumeCapability{c},
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 400 << 20, LimitBytes: 400 << 20}, VolumeContentSource: fromVolume(src.id)})
			if status.Code(err) != codes.OutOfRange {
				t.Errorf("clone smaller than its source = %v, want OUT_OF_RANGE", err)
			}
		})
	}
}

// TestSnapshotThawsOnError makes the clone fail while the source is
// frozen (a directory squats the snapshot's temporary image name) and
// checks that the filesystem is writable afterwards.
func TestSnapshotThawsOnError(t *testing.T) {
	d := startOn(t, poolXFS, 4<<30)
	src := create(t, d, "src", 256<<20, driver.MountCap("ext4"), nil, nil)
	up(t, d, src)
	sid := d.Pool.SnapshotID("snap")
	squat := filepath.Join(d.PoolDir, "snapshots", ".tmp-"+sid+".img")
	if err := os.MkdirAll(filepath.Join(squat, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := d.Controller.CreateSnapshot(context.Background(), &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: src.id})
	if err == nil || status.Code(err) == codes.Unknown {
		t.Fatalf("snapshot with its temporary name taken = %v, want a coded error", err)
	}
	if err := writeWithin(src, pattern(5, 1<<20), 5*time.Second); err != nil {
		t.Fatalf("filesystem left frozen after a failed snapshot: %v", err)
	}
	if err := os.RemoveAll(squat); err != nil {
		t.Fatal(err)
	}
	snapshot(t, d, "snap", src.id)
	down(t, d, src)
}

// writeWithin writes and syncs data, failing if that takes longer than
// limit (a frozen filesystem blocks writers until thawed).
func writeWithin(v *vol, data []byte, limit time.Duration) error {
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(v.path(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err == nil {
			_, err = f.Write(data)
			if err == nil {
				err = f.Sync()
			}
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		return context.DeadlineExceeded
	}
}
