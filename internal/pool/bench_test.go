package pool

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// The pool lives on /tmp/filevol-test/pool-bench (the root filesystem), so
// the figures include real fsyncs; FILEVOL_POOL_BENCH_DIR=<dir> runs them
// on another filesystem (a mounted xfs or btrfs, say) instead. Targets (for
// the whole CreateVolume RPC): p50 ≤ 1 ms for 1 GiB with the record
// durable; ≥ 3,000 creates/s from 8 clients; ListVolumes of 1,000 volumes
// ≤ 20 ms.

func BenchmarkCreate(b *testing.B) {
	for _, prov := range []string{volume.ProvisioningThin, volume.ProvisioningThick} {
		b.Run(prov, func(b *testing.B) {
			p := openPool(b, benchDir(b), Options{})
			lat := make([]time.Duration, 0, 4096)
			i := 0
			for b.Loop() {
				t0 := time.Now()
				_, err := p.Create(context.Background(), volume.CreateRequest{
					Name: fmt.Sprintf("pvc-%08d", i), CapacityBytes: gib, FSType: "ext4", Provisioning: prov,
					Parameters: map[string]string{"csi.storage.k8s.io/fstype": "ext4"},
				})
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				i++
				if prov == volume.ProvisioningThick {
					// Untimed would be fairer, but b.Loop times everything;
					// deleting keeps the shared disk from filling up.
					if err := p.Delete(context.Background(), VolumeID(fmt.Sprintf("pvc-%08d", i-1))); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportLatency(b, lat)
		})
	}
}

// BenchmarkCreateParallel runs 8 concurrent clients (parallelism 4 × the 2
// cores here), as the provisioner's worker threads do.
func BenchmarkCreateParallel(b *testing.B) {
	p := openPool(b, benchDir(b), Options{})
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	var n atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			name := fmt.Sprintf("pvc-%08d", n.Add(1))
			if _, err := p.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: gib}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
}

func BenchmarkDelete(b *testing.B) {
	p := openPool(b, benchDir(b), Options{})
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = mustCreate(b, p, volume.CreateRequest{Name: fmt.Sprintf("pvc-%08d", i), CapacityBytes: gib}).ID
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for _, id := range ids {
		t0 := time.Now()
		if err := p.Delete(context.Background(), id); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	reportLatency(b, lat)
}

// BenchmarkGetByName is the lookup CreateVolume does before creating: a
// miss (one failed open) on the first call, a read on retries.
func BenchmarkGetByName(b *testing.B) {
	p := openPool(b, benchDir(b), Options{})
	mustCreate(b, p, volume.CreateRequest{Name: "pvc-hit", CapacityBytes: gib})
	for _, name := range []string{"pvc-miss", "pvc-hit"} {
		b.Run(name[4:], func(b *testing.B) {
			for b.Loop() {
				_, _ = p.GetByName(name)
			}
		})
	}
}

// BenchmarkList1000 also reports what the index costs per volume in heap.
func BenchmarkList1000(b *testing.B) {
	dir := benchDir(b)
	p := openPool(b, dir, Options{})
	for i := range 1000 {
		mustCreate(b, p, volume.CreateRequest{Name: fmt.Sprintf("pvc-%08x-4c8c-9d5e-0a1b2c3d4e5f", i), CapacityBytes: gib,
			FSType: "ext4", Parameters: map[string]string{"csi.storage.k8s.io/fstype": "ext4"}})
	}
	_ = p.Close()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	p = openPool(b, dir, Options{})
	openTime := time.Since(t0)
	runtime.GC()
	runtime.ReadMemStats(&after)

	for b.Loop() {
		if len(p.List()) != 1000 {
			b.Fatal("short list")
		}
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1000, "index-B/vol")
	b.ReportMetric(float64(openTime.Microseconds())/1000, "open-ms")
}

// benchDir is a new empty pool directory for one benchmark run.
func benchDir(b *testing.B) string {
	root := os.Getenv("FILEVOL_POOL_BENCH_DIR")
	if root == "" {
		return testutil.Scratch(b, "pool-bench")
	}
	dir, err := os.MkdirTemp(root, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
