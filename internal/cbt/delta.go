package cbt

import "github.com/filevol/filevol/internal/hostos/extents"

// Delta returns the ranges of [0, targetSize) where the snapshot mapped by
// target may hold other bytes than the one mapped by base, from the maps
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
func Delta(base, target []extents.Extent, baseSize, targetSize int64) []Range {
	var out []Range
	b, t := cursor{es: base, size: baseSize}, cursor{es: target, size: targetSize}
	for pos := int64(0); pos < targetSize; {
		be, bNext := b.at(pos)
		te, tNext := t.at(pos)
		end := min(bNext, tNext, targetSize)
		if differ(be, te) {
			out = appendMerged(out, Range{pos, end - pos})
		}
		pos = end
	}
	return out
}

// cursor walks one map in logical order.
type cursor struct {
	es   []extents.Extent
	size int64
	i    int
}

// at returns the extent with data at pos (nil: a hole or zeros) and where
// that answer next changes. pos never goes back.
func (c *cursor) at(pos int64) (*extents.Extent, int64) {
	if pos >= c.size {
		return nil, int64(^uint64(0) >> 1)
	}
	for c.i < len(c.es) && (c.es[c.i].End() <= pos || !hasData(c.es[c.i])) {
		c.i++
	}
	if c.i == len(c.es) {
		return nil, c.size
	}
	e := &c.es[c.i]
	if e.Logical > pos {
		return nil, min(e.Logical, c.size)
	}
	return e, min(e.End(), c.size)
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
