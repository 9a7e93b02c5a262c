package extents

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestMapDataAndHoles maps a file written at 0 and at 1 MiB with a hole
// between, on the filesystem of the test's temporary directory.
func TestMapDataAndHoles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i%251 + 1)
	}
	for _, off := range []int64{0, 1 << 20} {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(4 << 20); err != nil {
		t.Fatal(err)
	}
	es, err := MapSynced(int(f.Fd()))
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no FIEMAP on %s", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	covered := func(off int64) bool {
		for _, e := range es {
			if e.Logical <= off && off < e.End() {
				return e.Flags&(FlagUnwritten|FlagDelalloc) == 0
			}
		}
		return false
	}
	for _, c := range []struct {
		off  int64
		data bool
	}{{0, true}, {64<<10 - 1, true}, {1 << 20, true}, {1<<20 + 64<<10 - 1, true}, {512 << 10, false}, {3 << 20, false}} {
		if covered(c.off) != c.data {
			t.Errorf("offset %d: data %v, want %v (extents %+v)", c.off, covered(c.off), c.data, es)
		}
	}
	for i := 1; i < len(es); i++ {
		if es[i].Logical < es[i-1].End() {
			t.Errorf("extents overlap or out of order: %+v", es)
		}
	}
	if len(es) == 0 || es[len(es)-1].Flags&FlagLast == 0 {
		t.Errorf("last extent not flagged last: %+v", es)
	}
}

// TestWalkAcrossBatches walks a map longer than one FIEMAP batch: every
// other 4 KiB block written, so each is an extent of its own.
func TestWalkAcrossBatches(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const blocks = 3*batch + 17
	block := make([]byte, 4096)
	for i := range blocks {
		block[0] = byte(i + 1)
		if _, err := f.WriteAt(block, int64(2*i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	w := WalkSynced(int(f.Fd()))
	var n int
	var prevEnd int64
	for {
		e, ok, err := w.Next()
		if errors.Is(err, ErrUnsupported) {
			t.Skip("no FIEMAP here")
		}
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if e.Logical < prevEnd {
			t.Fatalf("extent %d at %d before the previous end %d", n, e.Logical, prevEnd)
		}
		prevEnd = e.End()
		n++
	}
	if n != blocks {
		t.Errorf("walked %d extents, want %d (one per written block)", n, blocks)
	}
	if _, ok, err := w.Next(); ok || err != nil {
		t.Errorf("Next after the end: %v, %v", ok, err)
	}
}
