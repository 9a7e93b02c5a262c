package cbt

import (
	"errors"
	"slices"
	"testing"

	"github.com/filevol/filevol/internal/hostos/extents"
)

const K = 4096

// ext is a hand-made extent: logical and length in blocks, physical in
// blocks (the device address).
func ext(logical, physical, length int64, flags uint32) extents.Extent {
	return extents.Extent{Logical: logical * K, Physical: physical * K, Length: length * K, Flags: flags}
}

func rg(off, n int64) Range { return Range{off * K, n * K} }

// slice is a Source over a hand-made map.
type slice struct {
	es []extents.Extent
	i  int
}

func (s *slice) Next() (extents.Extent, bool, error) {
	if s.i == len(s.es) {
		return extents.Extent{}, false, nil
	}
	s.i++
	return s.es[s.i-1], true, nil
}

// delta and allocated gather Delta's and Allocated's ranges, merged.
func delta(base, target []extents.Extent, baseSize, targetSize int64) []Range {
	var out []Range
	if err := Delta(&slice{es: base}, &slice{es: target}, baseSize, targetSize, Collect(&out)); err != nil {
		panic(err)
	}
	return out
}

func allocated(es []extents.Extent, size int64) []Range {
	var out []Range
	if err := Allocated(&slice{es: es}, size, Collect(&out)); err != nil {
		panic(err)
	}
	return out
}

// A map out of order is refused, never walked past: a cursor that went
// back would miss what changed.
func TestDeltaRefusesAMapOutOfOrder(t *testing.T) {
	bad := &slice{es: []extents.Extent{ext(4, 4, 2, 0), ext(0, 0, 2, 0)}}
	err := Delta(&slice{}, bad, 8*K, 8*K, func(Range) error { return nil })
	if err == nil {
		t.Fatal("a map out of order walked without an error")
	}
}

func TestAllocated(t *testing.T) {
	es := []extents.Extent{
		ext(0, 100, 2, 0),
		ext(2, 500, 3, extents.FlagShared), // adjacent: merged, whatever the device says
		ext(8, 9, 1, extents.FlagUnwritten),
		ext(10, 10, 4, 0),
		ext(16, 16, 8, extents.FlagLast), // past the size: cut
	}
	got := allocated(es, 20*K)
	want := []Range{rg(0, 5), rg(10, 4), rg(16, 4)}
	if !slices.Equal(got, want) {
		t.Errorf("Allocated = %v, want %v", got, want)
	}
	if got := allocated(nil, 20*K); got != nil {
		t.Errorf("Allocated of a sparse file = %v, want none", got)
	}
}

func TestDelta(t *testing.T) {
	base := []extents.Extent{
		ext(0, 100, 10, extents.FlagShared), // shared with the target at 0..4, 6..10
		ext(12, 300, 2, 0),                  // punched in the target
		ext(20, 400, 2, extents.FlagUnwritten),
	}
	target := []extents.Extent{
		ext(0, 100, 4, extents.FlagShared),
		ext(4, 900, 2, 0),                      // rewritten: new blocks
		ext(6, 106, 4, extents.FlagShared),     // the base's, split
		ext(20, 700, 2, extents.FlagUnwritten), // zeros both sides
		ext(24, 800, 1, 0),                     // written where the base had a hole
		ext(30, 30, 4, 0),                      // past the base's end (grown)
	}
	got := delta(base, target, 28*K, 40*K)
	want := []Range{rg(4, 2), rg(12, 2), rg(24, 1), rg(30, 4)}
	if !slices.Equal(got, want) {
		t.Errorf("Delta = %v, want %v", got, want)
	}
	if got := delta(target, target, 40*K, 40*K); got != nil {
		t.Errorf("Delta of a map with itself = %v, want none", got)
	}
	if got := delta(nil, nil, 0, 40*K); got != nil {
		t.Errorf("Delta of two sparse images = %v, want none", got)
	}
	// The same blocks at another logical offset are other bytes there.
	if got := delta([]extents.Extent{ext(0, 50, 2, 0)}, []extents.Extent{ext(1, 50, 2, 0)}, 4*K, 4*K); !slices.Equal(got, []Range{rg(0, 3)}) {
		t.Errorf("Delta of a shifted extent = %v, want %v", got, []Range{rg(0, 3)})
	}
}

// TestDeltaOpaque: a compressed extent's physical is its start for every
// part of it: only one reported identically is shared.
func TestDeltaOpaque(t *testing.T) {
	enc := uint32(extents.FlagEncoded)
	same := []extents.Extent{ext(0, 70, 4, enc|extents.FlagShared)}
	if got := delta(same, []extents.Extent{ext(0, 70, 4, enc|extents.FlagShared|extents.FlagLast)}, 4*K, 4*K); got != nil {
		t.Errorf("identical encoded extents differ: %v", got)
	}
	// Split by a write: the remaining parts report the same start.
	split := []extents.Extent{ext(0, 70, 1, enc), ext(1, 900, 1, 0), ext(2, 70, 2, enc)}
	got := delta(same, split, 4*K, 4*K)
	if !slices.Equal(got, []Range{rg(0, 4)}) {
		t.Errorf("Delta of a split encoded extent = %v, want all of it", got)
	}
	if got := delta([]extents.Extent{ext(0, 0, 4, extents.FlagDelalloc)}, []extents.Extent{ext(0, 0, 4, extents.FlagDelalloc)}, 4*K, 4*K); !slices.Equal(got, []Range{rg(0, 4)}) {
		t.Errorf("delayed allocations compared equal: %v", got)
	}
}

func TestUnion(t *testing.T) {
	got := Union([]Range{rg(0, 2), rg(10, 2)}, []Range{rg(1, 3), rg(6, 1), rg(12, 1)})
	want := []Range{rg(0, 4), rg(6, 1), rg(10, 3)}
	if !slices.Equal(got, want) {
		t.Errorf("Union = %v, want %v", got, want)
	}
}

func TestPager(t *testing.T) {
	in := []Range{rg(0, 2), rg(2, 2), rg(5, 1), rg(7, 3), rg(11, 1), rg(13, 1), rg(15, 1)}
	run := func(from int64, max int) [][]Range {
		var pages [][]Range
		p := &Pager{From: from, Max: max, Send: func(rs []Range) error { pages = append(pages, rs); return nil }}
		for _, r := range in {
			if err := p.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		return pages
	}
	eq := func(a, b [][]Range) bool { return slices.EqualFunc(a, b, slices.Equal) }
	if got, want := run(0, 2), [][]Range{{rg(0, 4), rg(5, 1)}, {rg(7, 3), rg(11, 1)}, {rg(13, 1), rg(15, 1)}}; !eq(got, want) {
		t.Errorf("pages of 2 = %v, want %v", got, want)
	}
	// Cut at 8 KiB into 7..10: begins at 8; what ends before is gone.
	if got, want := run(8*K, 0), [][]Range{{rg(8, 2), rg(11, 1), rg(13, 1), rg(15, 1)}}; !eq(got, want) {
		t.Errorf("from 8 blocks = %v, want %v", got, want)
	}
	if got, want := run(10*K, 3), [][]Range{{rg(11, 1), rg(13, 1), rg(15, 1)}}; !eq(got, want) {
		t.Errorf("from the end of a range = %v, want %v", got, want)
	}
	// Nothing after from: one empty message, which carries the capacity.
	if got := run(16*K, 2); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("from past the data = %v, want one empty page", got)
	}
	p := &Pager{Send: func([]Range) error { return nil }}
	_ = p.Add(rg(4, 2))
	if err := p.Add(rg(5, 1)); err == nil {
		t.Error("overlapping range accepted")
	}
	boom := errors.New("stream gone")
	p = &Pager{Max: 1, Send: func([]Range) error { return boom }}
	_ = p.Add(rg(0, 1))
	if err := p.Add(rg(2, 1)); !errors.Is(err, boom) {
		t.Errorf("send error lost: %v", err)
	}
}
