package fake

import (
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/ofd"
)

// lockSeg is one lock: bytes [start, end) of a file (end math.MaxInt64:
// to the end of the file), held by an *os.File's description or by a
// holder elsewhere.
type lockSeg struct {
	f          *os.File
	elsewhere  int
	typ        ofd.Type
	start, end int64
}

func (s lockSeg) sameOwner(o lockSeg) bool { return s.f == o.f && s.elsewhere == o.elsewhere }

func (s lockSeg) lock() ofd.Lock {
	r := ofd.Range{Start: s.start}
	if s.end != math.MaxInt64 {
		r.Len = s.end - s.start
	}
	return ofd.Lock{Type: s.typ, Range: r}
}

// bounds is r as [start, end), or EINVAL.
func bounds(op string, t ofd.Type, r ofd.Range) (start, end int64, err error) {
	if op != "Unlock" && t != ofd.Read && t != ofd.Write || r.Start < 0 || r.Len < 0 || r.Len > math.MaxInt64-r.Start {
		return 0, 0, unix.EINVAL
	}
	if r.Len == 0 {
		return r.Start, math.MaxInt64, nil
	}
	return r.Start, r.Start + r.Len, nil
}

// conflict is the first lock of another holder that want conflicts with.
func (l *Locks) conflict(id fileID, want lockSeg) (lockSeg, bool) {
	for _, s := range l.files[id] {
		if !s.sameOwner(want) && s.start < want.end && want.start < s.end && (s.typ == ofd.Write || want.typ == ofd.Write) {
			return s, true
		}
	}
	return lockSeg{}, false
}

// remove drops want's owner's locks on want's bytes, splitting those that
// reach beyond them.
func (l *Locks) remove(id fileID, want lockSeg) {
	var out []lockSeg
	for _, s := range l.files[id] {
		if !s.sameOwner(want) || s.end <= want.start || want.end <= s.start {
			out = append(out, s)
			continue
		}
		if s.start < want.start {
			left := s
			left.end = want.start
			out = append(out, left)
		}
		if want.end < s.end {
			right := s
			right.start = want.end
			out = append(out, right)
		}
	}
	l.files[id] = out
}

// apply sets want in place of its owner's locks on those bytes, merged
// with the owner's locks of the same type it overlaps or touches.
func (l *Locks) apply(id fileID, want lockSeg) {
	l.remove(id, want)
	var out []lockSeg
	for _, s := range l.files[id] {
		if s.sameOwner(want) && s.typ == want.typ && s.start <= want.end && want.start <= s.end {
			want.start, want.end = min(want.start, s.start), max(want.end, s.end)
			continue
		}
		out = append(out, s)
	}
	l.files[id] = append(out, want)
}
