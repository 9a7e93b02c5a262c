package fs

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

func benchmarkFormat(b *testing.B, fstype string) {
	needFS(b, fstype)
	dir := scratch(b)
	ctx := context.Background()
	var times []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// A fresh image each time, as CreateVolume makes one.
		// Detached by hand below: a cleanup registered per iteration
		// could detach a number reused by a later attach.
		dev, img := attachImage(b, dir, 1<<30)
		b.StartTimer()
		start := time.Now()
		if err := tools.Format(ctx, dev.Path, fstype); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
		b.StopTimer()
		if err := loop.Detach(dev.Path); err != nil {
			b.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(img, &st); err == nil {
			b.ReportMetric(float64(st.Blocks*512)/(1<<20), "MiB-allocated")
		}
		if err := os.Remove(img); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
}

func BenchmarkFormatExt4_1GiB(b *testing.B)  { benchmarkFormat(b, "ext4") }
func BenchmarkFormatXFS_1GiB(b *testing.B)   { benchmarkFormat(b, "xfs") }
func BenchmarkFormatBtrfs_1GiB(b *testing.B) { benchmarkFormat(b, "btrfs") }

// BenchmarkProbeBlank1GiB is the other program NodeStageVolume runs before
// mkfs on a new volume.
func BenchmarkProbeBlank1GiB(b *testing.B) {
	needTool(b, "blkid")
	dev, _ := newDevice(b, scratch(b), 1<<30)
	for b.Loop() {
		if typ, err := tools.Probe(context.Background(), dev.Path); typ != "" || err != nil {
			b.Fatalf("Probe = %q, %v", typ, err)
		}
	}
}
