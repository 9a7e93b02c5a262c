package dirpool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
)

// BenchmarkGuardWindow measures the guard's window (make bench-guard): a
// pod makes a subvolume outside its 64 MiB volume's quota and writes
// 1 MiB at a time into it until EDQUOT, with the default interval. It
// reports the time from the subvolume's creation to the EDQUOT and the
// bytes written past the size, for writes fsynced each MiB and buffered.
// Nothing is asserted: these are figures for docs/security.md.
func BenchmarkGuardWindow(b *testing.B) {
	for _, synced := range []bool{true, false} {
		name := map[bool]string{true: "fsynced", false: "buffered"}[synced]
		b.Run(name, func(b *testing.B) {
			dir := dirpooltest.Btrfs(b, testutil.Scratch(b, "guardbench"), 4<<30)
			p, err := Open(dir, Options{NodeID: "n1"})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			var secs, past float64
			for i := range b.N {
				v := create(b, p, fmt.Sprintf("v%d", i), 64*mib, nil)
				start := time.Now()
				escape(b, p, v, "esc", nil, false)
				n, err := fillUntil(filepath.Join(dir, v.Path, "esc", "f"), 2<<30, synced)
				if !errors.Is(err, syscall.EDQUOT) {
					b.Fatalf("wrote %d bytes: %v, want EDQUOT", n, err)
				}
				secs += time.Since(start).Seconds()
				past += float64(max(n-64*mib, 0)) / mib
			}
			b.ReportMetric(secs/float64(b.N), "s-to-EDQUOT")
			b.ReportMetric(past/float64(b.N), "MiB-past-size")
		})
	}
}

// fillUntil writes 1 MiB at a time to path until an error or n bytes.
func fillUntil(path string, n int64, synced bool) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, mib)
	var done int64
	for done < n {
		w, err := f.Write(buf)
		done += int64(w)
		if err == nil && synced {
			err = f.Sync()
		}
		if err != nil {
			return done, err
		}
	}
	return done, f.Sync()
}

// BenchmarkGuardPass is one guard pass over a pool of 600 subvolumes
// (100 volumes, each with 5 nested), nothing to repair: the guard's
// steady cost.
func BenchmarkGuardPass(b *testing.B) {
	dir := dirpooltest.Btrfs(b, testutil.Scratch(b, "guardbench"), 4<<30)
	p, err := Open(dir, Options{NodeID: "n1", GuardInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for i := range 100 {
		v := create(b, p, fmt.Sprintf("v%d", i), 64*mib, nil)
		fd, err := p.openVolume(v)
		if err != nil {
			b.Fatal(err)
		}
		for j := range 5 {
			if err := createSubvolume(fd, fmt.Sprintf("n%d", j)); err != nil {
				b.Fatal(err)
			}
		}
		_ = unix.Close(fd)
	}
	b.ResetTimer()
	for range b.N {
		if err := p.GuardPass(); err != nil {
			b.Fatal(err)
		}
	}
}
