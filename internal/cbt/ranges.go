// Package cbt is changed-block tracking's arithmetic: from the extent
// maps of snapshot images (internal/hostos/extents) it derives the ranges
// a snapshot holds data in (Allocated) and the ranges where two snapshots
// of one volume may differ (Delta), and it pages them out as the CSI
// SnapshotMetadata service streams them (Pager). Where extent maps say
// nothing about sharing (images copied, not reflinked) it compares the
// data instead (CompareData). It knows no gRPC and no pool: the service
// (internal/csi) opens the images and sends the pages.
package cbt

import "github.com/filevol/filevol/internal/hostos/extents"

// Range is a byte range of a volume: CSI BlockMetadata.
type Range struct {
	Offset, Length int64
}

// End is the offset just past the range.
func (r Range) End() int64 { return r.Offset + r.Length }

// BlockSize is the granule of a data comparison: filesystems and backup
// tools address volumes in 4 KiB blocks, and image extents are aligned
// to it on every pool filesystem.
const BlockSize = 4096

// hasData reports whether an extent holds bytes a reader would see:
// unwritten (preallocated) extents read as zeros, exactly as holes do, so
// neither counts as data. A thick volume's fallocated space is not
// allocated in the CSI sense: nothing was written there.
func hasData(e extents.Extent) bool { return e.Flags&extents.FlagUnwritten == 0 && e.Length > 0 }

// Allocated passes to add, in order, the ranges of [0, size) that hold
// data by the map src (adjacent ones may come apart: the Pager and
// Collect merge them).
func Allocated(src Source, size int64, add func(Range) error) error {
	for {
		e, ok, err := src.Next()
		if err != nil || !ok {
			return err
		}
		if !hasData(e) || e.Logical >= size {
			continue
		}
		if err := add(Range{e.Logical, min(e.End(), size) - e.Logical}); err != nil {
			return err
		}
	}
}

// Collect returns an add function for Allocated or Delta that gathers
// the ranges into *out, merged where adjacent: for the callers that need
// them all at once (the data comparison's candidates, tests).
func Collect(out *[]Range) func(Range) error {
	return func(r Range) error {
		*out = appendMerged(*out, r)
		return nil
	}
}

// appendMerged appends r to the ordered ranges out, extending the last
// one when r continues it.
func appendMerged(out []Range, r Range) []Range {
	if r.Length <= 0 {
		return out
	}
	if n := len(out); n > 0 && out[n-1].End() == r.Offset {
		out[n-1].Length += r.Length
		return out
	}
	return append(out, r)
}

// Union returns the ordered union of two ordered lists of ranges, merged.
func Union(a, b []Range) []Range {
	var out []Range
	add := func(r Range) {
		if n := len(out); n > 0 && r.Offset <= out[n-1].End() {
			out[n-1].Length = max(out[n-1].End(), r.End()) - out[n-1].Offset
			return
		}
		out = append(out, r)
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && a[i].Offset <= b[j].Offset) {
			add(a[i])
			i++
		} else {
			add(b[j])
			j++
		}
	}
	return out
}
