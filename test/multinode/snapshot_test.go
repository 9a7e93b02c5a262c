package multinode

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestSnapshotAndCloneOfAnAttachedVolume: the controller (another process,
// on GlusterFS another client mount) snapshots and clones an ext4 volume
// that node-a has attached, staged and published, with a file written and
// not synced. node-a freezes the filesystem for each (its agent answers
// the request it finds in the pool by polling: inotify sees no other
// client's changes) and thaws it after; the snapshot's restore and the
// clone, attached to node-b, hold the file. DeleteVolume of the attached
// volume is refused naming node-a.
func TestSnapshotAndCloneOfAnAttachedVolume(t *testing.T) {
	for _, backend := range backendsWithCeph() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b")
			a, b := c.nodes["node-a"], c.nodes["node-b"]
			id := c.create("source", ext4Cap)
			a.Use(t, id, ext4Cap, c.mustPublish(id, "node-a", ext4Cap))
			data := bytes.Repeat([]byte("written on node-a, not synced "), 2000)
			if err := os.WriteFile(filepath.Join(a.Target, "file"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
			wantCode(t, "DeleteVolume of a volume staged on node-a", err, codes.FailedPrecondition, "node-a")

			snap, err := c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "of-attached", SourceVolumeId: id})
			if err != nil {
				t.Fatal(err)
			}
			if !a.p.LogHas("filesystem frozen", id) || !a.p.LogHas("filesystem thawed", id) {
				t.Fatalf("node-a's log shows no freeze and thaw of %s for the snapshot:\n%s", id, a.p.LogText())
			}
			restored, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "restored", VolumeCapabilities: []*csipb.VolumeCapability{ext4Cap},
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20},
				VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
					Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}})
			if err != nil {
				t.Fatal(err)
			}
			clone, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "clone", VolumeCapabilities: []*csipb.VolumeCapability{ext4Cap},
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20},
				VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
					Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: id}}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []*csipb.Volume{restored.GetVolume(), clone.GetVolume()} {
				vid := v.GetVolumeId()
				b.Use(t, vid, ext4Cap, c.mustPublish(vid, "node-b", ext4Cap))
				if got, err := os.ReadFile(filepath.Join(b.Target, "file")); err != nil || !bytes.Equal(got, data) {
					t.Errorf("volume %s made from node-a's attached volume: file %d bytes, %v; want %d", vid, len(got), err, len(data))
				}
				b.Release(t, vid)
				c.unpublish(vid, "node-b")
			}
			if _, err := c.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()}); err != nil {
				t.Fatal(err)
			}
			a.Release(t, id)
			c.unpublish(id, "node-a")
		})
	}
}
