// Package extents reads a file's extent map (FS_IOC_FIEMAP): where each
// range of the file lives on the filesystem's device, or that it is a
// hole. It is FIEMAP's one owner in filevol: the pool sums what thick
// volumes hold exclusively with it, the SnapshotMetadata service finds a
// snapshot's allocated ranges and, on reflink pools, what two snapshots
// do not share.
package extents

import (
	"errors"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Extent is one mapped range of a file (struct fiemap_extent).
type Extent struct {
	// Logical is the offset in the file, Physical where the range starts
	// on the device (on btrfs an address in its own logical space; only
	// meaningful without FlagEncoded and the flags of Opaque), Length its
	// size in bytes.
	Logical, Physical, Length int64
	Flags                     uint32
}

// End is the offset just past the extent.
func (e Extent) End() int64 { return e.Logical + e.Length }

// Flags of an extent (linux/fiemap.h).
const (
	FlagLast          = 0x1
	FlagUnknown       = 0x2   // physical address not known
	FlagDelalloc      = 0x4   // data not written out yet: no address
	FlagEncoded       = 0x8   // compressed or encoded: Physical is the encoded extent's start
	FlagDataEncrypted = 0x80  // Physical holds encrypted bytes
	FlagNotAligned    = 0x100 // not block aligned
	FlagDataInline    = 0x200 // data in the metadata: no address of its own
	FlagDataTail      = 0x400 // packed with other files' tails
	FlagUnwritten     = 0x800 // allocated, reads as zeros
	FlagMerged        = 0x1000
	FlagShared        = 0x2000 // other files map these blocks too
)

// Opaque are the flags under which Physical does not locate the bytes of
// each logical offset linearly: such an extent is the same as another
// only if both are reported identically.
const Opaque = FlagUnknown | FlagDelalloc | FlagEncoded | FlagNotAligned | FlagDataInline | FlagDataTail

// ErrUnsupported: the file's filesystem has no FIEMAP (tmpfs, FUSE,
// network filesystems): its extents cannot be known.
var ErrUnsupported = errors.New("the filesystem does not report extents (FIEMAP)")

// FS_IOC_FIEMAP and its structures; x/sys/unix has none.
const (
	iocFiemap     = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapSync    = 0x1        // FIEMAP_FLAG_SYNC: write dirty data out first
	batch         = 256
	maxFileOffset = int64(^uint64(0) >> 1)
)

type header struct {
	Start, Length                     uint64
	Flags, MappedExtents, ExtentCount uint32
	_                                 uint32
}

type rawExtent struct {
	Logical, Physical, Length uint64
	_                         [2]uint64
	Flags                     uint32
	_                         [3]uint32
}

type buffer struct {
	hdr     header
	extents [batch]rawExtent
}

// Map returns the extents of the open file fd in logical order. A hole is
// a range no extent covers. Data not written out yet may be reported as
// FlagDelalloc, without an address. ErrUnsupported where the filesystem
// cannot tell.
func Map(fd int) ([]Extent, error) { return collect(Walk(fd)) }

// MapSynced is Map after the file's dirty data is written out
// (FIEMAP_FLAG_SYNC), so that every range has its address: what a
// comparison of two files' maps needs. On a clean file it costs nothing
// more; on a busy one it is a flush, which is why Map does not.
func MapSynced(fd int) ([]Extent, error) { return collect(WalkSynced(fd)) }

func collect(w *Walker) ([]Extent, error) {
	var out []Extent
	for {
		e, ok, err := w.Next()
		if err != nil || !ok {
			return sorted(out), err
		}
		out = append(out, e)
	}
}

// Walker reads a file's extent map a batch of FIEMAP at a time, in the
// order FIEMAP reports it (logical): a caller that walks a map of millions
// of extents (a large volume's snapshot, changed at random places) holds
// one batch of them, not the whole map.
type Walker struct {
	fd    int
	flags uint32
	buf   buffer
	n, i  int    // extents in buf, and the next to return
	start uint64 // where the next batch starts
	done  bool
}

// Walk walks the extents of the open file fd (as Map).
func Walk(fd int) *Walker { return &Walker{fd: fd} }

// WalkSynced walks them after the file's dirty data is written out (as
// MapSynced).
func WalkSynced(fd int) *Walker { return &Walker{fd: fd, flags: fiemapSync} }

// Next returns the next extent, or ok false past the last. ErrUnsupported
// comes from the first call, where the filesystem cannot tell.
func (w *Walker) Next() (Extent, bool, error) {
	if w.i == w.n {
		if w.done {
			return Extent{}, false, nil
		}
		if err := w.fill(); err != nil || w.n == 0 {
			return Extent{}, false, err
		}
	}
	r := w.buf.extents[w.i]
	w.i++
	if r.Flags&FlagLast != 0 {
		w.done = true
	}
	return Extent{Logical: int64(r.Logical), Physical: int64(r.Physical),
		Length: int64(min(r.Length, uint64(maxFileOffset))), Flags: r.Flags}, true, nil
}

// fill asks FIEMAP for the next batch.
func (w *Walker) fill() error {
	for {
		w.buf.hdr = header{Start: w.start, Length: ^uint64(0) - w.start, Flags: w.flags, ExtentCount: batch}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(w.fd), iocFiemap, uintptr(unsafe.Pointer(&w.buf)))
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EOPNOTSUPP || e == unix.ENOTTY:
			return ErrUnsupported
		case e != 0:
			return e
		}
		w.n, w.i = int(w.buf.hdr.MappedExtents), 0
		if w.n == 0 {
			w.done = true
			return nil
		}
		last := w.buf.extents[w.n-1]
		w.start = last.Logical + last.Length
		return nil
	}
}

// sorted: FIEMAP reports in logical order; sorting anyway costs little
// and every reader of a map relies on the order.
func sorted(es []Extent) []Extent {
	slices.SortFunc(es, func(a, b Extent) int {
		switch {
		case a.Logical < b.Logical:
			return -1
		case a.Logical > b.Logical:
			return 1
		}
		return 0
	})
	return es
}
