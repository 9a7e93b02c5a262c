package multinode

import (
	"slices"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/csi"
)

// TestControllersShareOneView: every controller replica of a shared pool
// answers from the pool, not from what it loaded when it started: a
// replica that was standing by during the leader's creates and deletes
// (then leads after a hand-over) lists the volumes and snapshots the
// other made, not the ones it deleted, and counts a thick volume the
// other made in the capacity it reports. On CephFS, which cannot
// preallocate, the thick volume is refused (INVALID_ARGUMENT naming
// CephFS) and a thin one stands in.
func TestControllersShareOneView(t *testing.T) {
	for _, backend := range backendsWithCeph() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true)
			standby := csipb.NewControllerClient(c.start("ctrl2", "controller", c.poolFor("ctrl2"), c.dir).Conn)
			capacity := func(cc csipb.ControllerClient) int64 {
				r, err := cc.GetCapacity(ctx, &csipb.GetCapacityRequest{})
				if err != nil {
					t.Fatal(err)
				}
				return r.GetAvailableCapacity()
			}
			list := func(cc csipb.ControllerClient) []string {
				r, err := cc.ListVolumes(ctx, &csipb.ListVolumesRequest{})
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, e := range r.GetEntries() {
					ids = append(ids, e.GetVolume().GetVolumeId())
				}
				return ids
			}
			listSnaps := func(cc csipb.ControllerClient) []string {
				r, err := cc.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, e := range r.GetEntries() {
					ids = append(ids, e.GetSnapshot().GetSnapshotId())
				}
				return ids
			}
			before := capacity(standby)
			keep, gone := c.create("kept", blockCap), c.create("deleted", blockCap)
			prov := "thick"
			if backend == "ceph" {
				// CephFS cannot preallocate (ceph-fuse's fallocate sets the
				// length only: test/ceph TestThickRefusedOnCephFS), so a
				// thick volume is refused there and the third volume is
				// thin: the view is shared all the same, and the capacity
				// is compared with nothing held back for it.
				_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "thick", VolumeCapabilities: []*csipb.VolumeCapability{blockCap},
					CapacityRange: &csipb.CapacityRange{RequiredBytes: 256 << 20}, Parameters: map[string]string{"provisioning": "thick"}})
				wantCode(t, "a thick CreateVolume on CephFS", err, codes.InvalidArgument, "CephFS", "cannot preallocate")
				prov = "thin"
			}
			thick, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: prov, VolumeCapabilities: []*csipb.VolumeCapability{blockCap},
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 256 << 20}, Parameters: map[string]string{"provisioning": prov}})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: keep})
			if err != nil {
				t.Fatal(err)
			}
			if got := list(standby); !slices.Contains(got, keep) || !slices.Contains(got, gone) || !slices.Contains(got, thick.GetVolume().GetVolumeId()) {
				t.Fatalf("the standby controller lists %v; want the leader's %s, %s and %s", got, keep, gone, thick.GetVolume().GetVolumeId())
			}
			if got := listSnaps(standby); !slices.Contains(got, snap.GetSnapshot().GetSnapshotId()) {
				t.Fatalf("the standby controller lists snapshots %v; want the leader's %s", got, snap.GetSnapshot().GetSnapshotId())
			}
			if _, err := c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: gone}); err != nil {
				t.Fatal(err)
			}
			if got := list(standby); slices.Contains(got, gone) {
				t.Fatalf("the standby controller still lists %s, which the leader deleted", gone)
			}
			// Capacity is the pool's, one figure for its topology segment
			// whichever replica answers (statfs of the one filesystem,
			// which other tenants of this machine change meanwhile: within
			// 64 MiB), and nothing for another pool's segment.
			leader, other := capacity(c.ctrl), capacity(standby)
			t.Logf("%s: available before %d, after a 256 MiB %s volume: leader %d, standby %d", backend, before, prov, leader, other)
			if d := leader - other; d > 64<<20 || d < -64<<20 {
				t.Errorf("capacity: leader %d, standby %d: want one figure", leader, other)
			}
			for seg, want := range map[string]bool{poolName: true, "another-pool": false} {
				r, err := standby.GetCapacity(ctx, &csipb.GetCapacityRequest{AccessibleTopology: &csipb.Topology{Segments: map[string]string{csi.PoolTopologyKey: seg}}})
				if err != nil {
					t.Fatal(err)
				}
				if got := r.GetAvailableCapacity() > 0; got != want {
					t.Errorf("GetCapacity for %s=%s: %d bytes; want capacity %v", csi.PoolTopologyKey, seg, r.GetAvailableCapacity(), want)
				}
			}
		})
	}
}
