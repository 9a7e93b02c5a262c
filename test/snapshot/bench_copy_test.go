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
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/test/driver"
)

const copyData = 1 << 30

// dropCache writes back and evicts path from the page cache, so the next
// copy reads the disk (not /proc/sys/vm/drop_caches: other work shares
// this machine).
func dropCache(b *testing.B, path string) {
	b.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}

// seqCopy is the pool's sequential copy bandwidth baseline: a dense file
// copied as cp or dd would, read/write in 1 MiB buffers then fsync, or
// with copy_file_range then fsync.
func seqCopy(b *testing.B, src, dst string, cfr bool) time.Duration {
	b.Helper()
	dropCache(b, src)
	t0 := time.Now()
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(dst)
	defer out.Close()
	if cfr {
		var off, woff int64
		for off < copyData {
			n, err := unix.CopyFileRange(int(in.Fd()), &off, int(out.Fd()), &woff, copyData-int(off), 0)
			if err != nil || n == 0 {
				b.Fatalf("copy_file_range: %d, %v", n, err)
			}
		}
	} else {
		buf := make([]byte, 1<<20)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if _, err := out.Write(buf[:n]); err != nil {
					b.Fatal(err)
				}
			}
			if err != nil {
				break
			}
		}
	}
	if err := out.Sync(); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// BenchmarkCopyEngine: on an ext4 pool, CreateSnapshot of a 10 GiB block
// volume holding 1 GiB (16 × 64 MiB spread over it), against the pool's
// own sequential copy of a dense 1 GiB file.
func BenchmarkCopyEngine(b *testing.B) {
	ctx := context.Background()
	d := startOn(b, poolExt4, 32<<30)
	v := create(b, d, "sparse", 10<<30, driver.BlockCap(), nil, nil)
	up(b, d, v)
	f, err := os.OpenFile(v.target, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	piece := pattern(43, 64<<20)
	for i := range int64(16) {
		if _, err := f.WriteAt(piece, i*640<<20); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	dense := filepath.Join(d.PoolDir, "dense.bin")
	df, err := os.Create(dense)
	if err != nil {
		b.Fatal(err)
	}
	for range 16 {
		if _, err := df.Write(piece); err != nil {
			b.Fatal(err)
		}
	}
	df.Close()
	defer os.Remove(dense)

	const n = 9
	var rw, cfr, snap []time.Duration
	var ratios []float64 // per round: the machine's load drifts between rounds
	var copied int64
	for i := range n {
		rw = append(rw, seqCopy(b, dense, dense+".rw", false))
		cfr = append(cfr, seqCopy(b, dense, dense+".cfr", true))
		dropCache(b, d.Pool.ImagePath(v.id))
		t0 := time.Now()
		id := snapshot(b, d, fmt.Sprintf("snap-%d", i), v.id).GetSnapshotId()
		snap = append(snap, time.Since(t0))
		ratios = append(ratios, min(rw[i], cfr[i]).Seconds()/snap[i].Seconds())
		copied = allocatedBytes(b, d.Pool.SnapshotImagePath(id))
		if _, err := d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
			b.Fatal(err)
		}
	}
	mbps := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(copyData) / (1 << 20) / s[len(s)/2].Seconds()
	}
	slices.Sort(ratios)
	ratio := 100 * ratios[len(ratios)/2]
	b.ReportMetric(mbps(snap), "snapshot-MiB/s")
	b.ReportMetric(mbps(rw), "readwrite-MiB/s")
	b.ReportMetric(mbps(cfr), "copy_file_range-MiB/s")
	b.ReportMetric(ratio, "pct-of-seq-copy")
	b.ReportMetric(float64(copied)/(1<<20), "copied-MiB")
	b.Logf("copy engine: 1 GiB in a 10 GiB volume: snapshot %.0f MiB/s, pool sequential copy %.0f MiB/s (read/write) %.0f MiB/s (copy_file_range) (medians of %d rounds); median per-round ratio to the faster copy %.0f %% (min %.0f %%, max %.0f %%); %d MiB allocated by the snapshot",
		mbps(snap), mbps(rw), mbps(cfr), n, ratio, 100*ratios[0], 100*ratios[n-1], copied>>20)
	down(b, d, v)
}

// BenchmarkExpandOnline: ControllerExpandVolume + NodeExpandVolume of a
// mounted 1 GiB volume to 10 GiB. ext4 needs CAP_SYS_RESOURCE online;
// without it, the offline path (unstage, expand, stage: e2fsck + resize2fs)
// is measured instead and named so.
func BenchmarkExpandOnline(b *testing.B) {
	for _, fsType := range []string{"xfs", "btrfs", "ext4"} {
		b.Run(fsType, func(b *testing.B) {
			ctx := context.Background()
			d := startOn(b, poolXFS, 16<<30)
			online := fsType != "ext4" || hasCapSysResource(b)
			var lat []time.Duration
			for i := range 10 {
				v := create(b, d, fmt.Sprintf("grow-%d", i), 1<<30, driver.MountCap(fsType), nil, nil)
				up(b, d, v)
				fill(b, v, 64<<20)
				var t0 time.Time
				if online {
					t0 = time.Now()
					if err := expand(ctx, d, v, 10<<30); err != nil {
						b.Fatal(err)
					}
				} else {
					down(b, d, v)
					t0 = time.Now()
					if _, err := d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
						VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 10 << 30}}); err != nil {
						b.Fatal(err)
					}
					up(b, d, v)
				}
				lat = append(lat, time.Since(t0))
				if total := statfsTotal(b, v.target); total < 9<<30 {
					b.Fatalf("%s has %d bytes after expanding to 10 GiB", fsType, total)
				}
				down(b, d, v)
				if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
					b.Fatal(err)
				}
			}
			what := "online"
			if !online {
				what = "offline-at-stage" // no CAP_SYS_RESOURCE: EXT4_IOC_RESIZE_FS is refused
			}
			reportLatency(b, what, lat)
		})
	}
}
