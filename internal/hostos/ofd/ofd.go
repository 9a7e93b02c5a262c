// Package ofd is filevol's one owner of open file description locks
// (fcntl F_OFD_SETLK, F_OFD_SETLKW, F_OFD_GETLK): how a lock is taken,
// tried, asked about and released, the retry of a call a signal
// interrupted, and the error that says another holder has the lock.
//
// They are filevol's fencing primitive. An OFD lock belongs to the open
// file description it was taken through, not to a process: it lives as
// long as that description does, whoever else holds a reference to it (a
// loop device configured on it keeps it for as long as the device
// exists), and the kernel drops it at the description's last close,
// however the process died. Unlike flock, NFS and GlusterFS enforce it
// between their clients, so it fences across hosts; unlike a POSIX
// record lock, two opens of one file in one process conflict, and closing
// an unrelated descriptor of the file drops nothing.
//
// The functions on a descriptor number (TryLockFD, LockFD, UnlockFD,
// ConflictFD) are for callers that hold a raw descriptor; Locker is the
// seam for callers that hold an *os.File and want to be tested on a fake
// kernel (internal/hostos/fake's Locks). It imports nothing of filevol, so
// every package that locks files may use it.
package ofd

import (
	"errors"
	"os"
	"strconv"
	"syscall"
)

// Type is the kind of a lock.
type Type int16

// Kinds of lock: read locks are shared, a write lock excludes every other
// description's lock on the bytes it covers. A read lock needs a
// descriptor open for reading, a write lock one open for writing (EBADF
// otherwise); asking about a lock (Conflict) needs neither.
const (
	Read  Type = syscall.F_RDLCK
	Write Type = syscall.F_WRLCK
)

func (t Type) String() string {
	switch t {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// Range is the bytes [Start, Start+Len) of a file; a Len of 0 runs to the
// end of the file, however far it grows. The zero Range is the whole
// file, as most of filevol's locks are. Start and Len must not be
// negative.
type Range struct {
	Start, Len int64
}

// Whole is the whole file.
var Whole = Range{}

func (r Range) String() string {
	if r.Len == 0 {
		return "[" + strconv.FormatInt(r.Start, 10) + ",end)"
	}
	return "[" + strconv.FormatInt(r.Start, 10) + "," + strconv.FormatInt(r.Start+r.Len, 10) + ")"
}

// Lock is a lock another description holds, as Conflict reports it.
type Lock struct {
	Type  Type
	Range Range
}

// ErrHeld is what a lock that was not given because another open file
// description holds a conflicting one matches (errors.Is). The error
// returned also matches the kernel's answer, EAGAIN or, on some
// filesystems, EACCES, so callers that test those still work.
var ErrHeld = errors.New("locked by another open file description")

// HeldError is the refusal of a lock request that another open file
// description's lock conflicts with.
type HeldError struct {
	// Op is the request, "F_OFD_SETLK" for the real kernel.
	Op string
	// Errno is the kernel's answer: EAGAIN or EACCES.
	Errno syscall.Errno
}

// Error reads as the request and the kernel's answer ("F_OFD_SETLK:
// resource temporarily unavailable"), what callers printed before this
// package owned the call.
func (e *HeldError) Error() string { return e.Op + ": " + e.Errno.Error() }

// Is makes the error match ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Unwrap is the kernel's answer.
func (e *HeldError) Unwrap() error { return e.Errno }

// Locker is how a caller locks files it holds open as *os.File: the real
// kernel (Kernel) or a fake one. Each lock belongs to f's open file
// description; closing f, or the last reference to that description,
// releases it. Setting a lock over bytes the description already locks
// replaces that lock in place, atomically (a write lock turned into a
// read lock is never free in between). Errors other than ErrHeld are the
// kernel's errno as it is (ENOLCK, EOPNOTSUPP on a filesystem without
// locks, EBADF for a lock the descriptor's mode does not allow, ...).
type Locker interface {
	// TryLock sets a lock of type t on r without waiting: an error
	// matching ErrHeld when another description's lock conflicts.
	TryLock(f *os.File, t Type, r Range) error
	// Lock sets a lock of type t on r, waiting for as long as another
	// description's lock conflicts. On GlusterFS a waiter is woken by an
	// unlock, not by a write lock turned into a read lock: wait only
	// where holders unlock (durable.WaitLock tries again instead).
	Lock(f *os.File, t Type, r Range) error
	// Unlock releases the description's locks on r; none is no error.
	Unlock(f *os.File, r Range) error
	// Conflict reports a lock of another description that a lock of
	// type t on r through f would conflict with, ok false when there is
	// none. It takes no lock: a probe that took one would, until it let
	// go, look to another probe like the holder it looks for.
	Conflict(f *os.File, t Type, r Range) (held Lock, ok bool, err error)
}
