package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/test/driver"
)

// The snapshot figures (hack/bench-snapshot.sh runs these with -benchtime=1x:
// each benchmark takes its own samples after one expensive setup and
// reports percentiles; ns/op is the whole run and means nothing).
//
//	CreateSnapshot on xfs (reflink), 256 MiB / 1 GiB / 4 GiB written: p50 ≤ 50 ms, flat
//	CreateVolume from that snapshot: p50 ≤ 50 ms
//	ext4 copy engine: ≥ 70 % of the pool's sequential copy bandwidth, ~1 GiB copied of 1 GiB in 10 GiB
//	online expansion 1 GiB → 10 GiB of a mounted volume: ≤ 300 ms

const samples = 20

func reportLatency(b *testing.B, what string, lat []time.Duration) {
	b.Helper()
	s := slices.Clone(lat)
	slices.Sort(s)
	pct := func(p int) time.Duration { return s[min(len(s)-1, len(s)*p/100)] }
	b.ReportMetric(float64(pct(50).Microseconds())/1000, what+"-p50-ms")
	b.ReportMetric(float64(pct(90).Microseconds())/1000, what+"-p90-ms")
	b.Logf("%s: n=%d p50=%v p90=%v max=%v", what, len(s), pct(50), pct(90), s[len(s)-1])
}

// fill writes n bytes of pattern into a file on v and syncs it.
func fill(b *testing.B, v *vol, n int64) {
	b.Helper()
	f, err := os.Create(filepath.Join(v.target, "data"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := pattern(42, 8<<20)
	for done := int64(0); done < n; done += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReflinkSnapshot: CreateSnapshot of a mounted xfs volume (freeze,
// FICLONE, thaw, record) and CreateVolume from the snapshot, on an xfs pool
// with reflink, for three amounts of written data.
func BenchmarkReflinkSnapshot(b *testing.B) {
	for _, size := range []int64{256 << 20, 1 << 30, 4 << 30} {
		b.Run(fmt.Sprintf("written=%dMiB", size>>20), func(b *testing.B) {
			ctx := context.Background()
			d := startOn(b, poolXFS, 32<<30)
			c := driver.MountCap("xfs")
			v := create(b, d, "src", size+1<<30, c, nil, nil)
			up(b, d, v)
			fill(b, v, size)
			var snapLat, restoreLat []time.Duration
			var snapID string
			for i := range samples {
				t0 := time.Now()
				snapID = snapshot(b, d, fmt.Sprintf("snap-%d", i), v.id).GetSnapshotId()
				snapLat = append(snapLat, time.Since(t0))
				if i < samples-1 {
					if _, err := d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snapID}); err != nil {
						b.Fatal(err)
					}
				}
			}
			for i := range samples {
				t0 := time.Now()
				r := create(b, d, fmt.Sprintf("restore-%d", i), size+1<<30, c, nil, fromSnapshot(snapID))
				restoreLat = append(restoreLat, time.Since(t0))
				if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: r.id}); err != nil {
					b.Fatal(err)
				}
			}
			reportLatency(b, "snapshot", snapLat)
			reportLatency(b, "restore", restoreLat)
			down(b, d, v)
		})
	}
}
