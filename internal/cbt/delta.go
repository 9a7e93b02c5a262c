package cbt

import (
	"fmt"

	"github.com/filevol/filevol/internal/hostos/extents"
)

// Delta passes to add, in order, the ranges of [0, targetSize) where the
// snapshot mapped by target may hold other bytes than the one mapped by
// base (adjacent ranges may come apart: the Pager merges them), from the maps
// alone: both are images of one volume on a reflink filesystem (xfs,
// btrfs), where a snapshot shares every extent of the volume it is cut
// from and a write to a shared block lands in a new extent (copy on
// write). A range maps to the same blocks in both only if it was not
// written in between, so where the maps agree the bytes agree, and no
// byte need be read to know it.
//
// A range is reported when one image holds data there and the other a
// hole or an unwritten extent, or both hold data at different places.
// Past baseSize (the volume grew between the snapshots) the base reads as
// zeros: only the target's data there is reported. What may be reported
// without a change: a block overwritten with the same bytes, or one
// unshared by anything else that rewrote it (a btrfs defragment); it is
// never the other way round.
func Delta(base, target Source, baseSize, targetSize int64, add func(Range) error) error {
	b, t := cursor{src: base, size: baseSize}, cursor{src: target, size: targetSize}
	for pos := int64(0); pos < targetSize; {
		be, bNext, err := b.at(pos)
		if err != nil {
			return err
		}
		te, tNext, err := t.at(pos)
		if err != nil {
			return err
		}
		end := min(bNext, tNext, targetSize)
		if differ(be, te) {
			if err := add(Range{pos, end - pos}); err != nil {
				return err
			}
		}
		pos = end
	}
	return nil
}

// Source yields a map's extents in logical order, one at a time (an
// extents.Walker): Delta and Allocated hold one extent of each map, so a
// map of millions costs no more memory than one of ten.
type Source interface {
	Next() (e extents.Extent, ok bool, err error)
}

// cursor walks one map in logical order.
type cursor struct {
	src     Source
	size    int64
	cur     extents.Extent
	have    bool  // cur is an extent not yet passed
	done    bool  // the source has no more
	prevEnd int64 // where the extent before cur ended
}

// at returns the extent with data at pos (nil: a hole or zeros) and where
// that answer next changes. pos never goes back. A map out of order is
// an error: a cursor that skipped back would miss ranges.
func (c *cursor) at(pos int64) (*extents.Extent, int64, error) {
	if pos >= c.size {
		return nil, int64(^uint64(0) >> 1), nil
	}
	for !c.have || c.cur.End() <= pos || !hasData(c.cur) {
		if c.done {
			return nil, c.size, nil
		}
		e, ok, err := c.src.Next()
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			c.done, c.have = true, false
			return nil, c.size, nil
		}
		if e.Logical < c.prevEnd {
			return nil, 0, fmt.Errorf("extent map out of order: an extent at %d after one that ended at %d", e.Logical, c.prevEnd)
		}
		c.prevEnd = e.End()
		c.cur, c.have = e, true
	}
	if c.cur.Logical > pos {
		return nil, min(c.cur.Logical, c.size), nil
	}
	return &c.cur, min(c.cur.End(), c.size), nil
}

// differ reports whether a range that base maps with b and target with t
// (nil: no data) may hold different bytes.
func differ(b, t *extents.Extent) bool {
	switch {
	case b == nil && t == nil:
		return false
	case b == nil || t == nil:
		return true
	case (b.Flags|t.Flags)&(extents.FlagUnknown|extents.FlagDelalloc) != 0:
		// No address at all: nothing says the blocks are shared.
		return true
	case b.Flags&extents.Opaque != 0 || t.Flags&extents.Opaque != 0:
		// Physical does not locate each offset (a compressed extent on
		// btrfs reports the compressed extent's start for every part of
		// it): only one extent reported identically in both is one
		// extent both still share.
		return b.Logical != t.Logical || b.Length != t.Length || b.Physical != t.Physical ||
			b.Flags&^(extents.FlagLast|extents.FlagShared|extents.FlagMerged) != t.Flags&^(extents.FlagLast|extents.FlagShared|extents.FlagMerged)
	default:
		// The same device block at every offset of the range.
		return b.Physical-b.Logical != t.Physical-t.Logical || (b.Flags^t.Flags)&extents.FlagDataEncrypted != 0
	}
}
