package snapshot

import (
	"context"
	"fmt"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/test/driver"
)

// BenchmarkGroupSnapshot: CreateVolumeGroupSnapshot of 8 mounted xfs
// volumes of 1 GiB, each holding 512 MiB, on an xfs pool with reflink:
// every filesystem frozen at once, 8 reflinks side by side, all thawed,
// the group record committed. For scale, the same 8 volumes snapshotted
// one by one with CreateSnapshot (each frozen, cloned and thawed alone,
// which is not consistent across them). Target: milliseconds, not seconds.
func BenchmarkGroupSnapshot(b *testing.B) {
	const volumes, size, written = 8, 1 << 30, 512 << 20
	ctx := context.Background()
	d := startOn(b, poolXFS, 16<<30)
	c := driver.MountCap("xfs")
	var vols []*vol
	var ids []string
	for i := range volumes {
		v := create(b, d, fmt.Sprintf("member-%d", i), size, c, nil, nil)
		up(b, d, v)
		fill(b, v, written)
		vols, ids = append(vols, v), append(ids, v.id)
	}
	var groupLat, oneByOneLat []time.Duration
	for i := range samples {
		t0 := time.Now()
		resp, err := d.Group.CreateVolumeGroupSnapshot(ctx, &csipb.CreateVolumeGroupSnapshotRequest{Name: fmt.Sprintf("group-%d", i), SourceVolumeIds: ids})
		groupLat = append(groupLat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		if n := len(resp.GetGroupSnapshot().GetSnapshots()); n != volumes {
			b.Fatalf("group of %d members, want %d", n, volumes)
		}
		if _, err := d.Group.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: resp.GetGroupSnapshot().GetGroupSnapshotId()}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range samples {
		var snaps []string
		t0 := time.Now()
		for j, v := range vols {
			snaps = append(snaps, snapshot(b, d, fmt.Sprintf("single-%d-%d", i, j), v.id).GetSnapshotId())
		}
		oneByOneLat = append(oneByOneLat, time.Since(t0))
		for _, id := range snaps {
			if _, err := d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportLatency(b, "group-of-8", groupLat)
	reportLatency(b, "8-snapshots-one-by-one", oneByOneLat)
	for _, v := range vols {
		down(b, d, v)
	}
}
