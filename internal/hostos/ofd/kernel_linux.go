package ofd

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Kernel is the Locker of the running kernel.
type Kernel struct{}

var _ Locker = Kernel{}

// TryLock is TryLockFD on f's descriptor.
func (Kernel) TryLock(f *os.File, t Type, r Range) error {
	return onFile(f, func(fd int) error { return TryLockFD(fd, t, r) })
}

// Lock is LockFD on f's descriptor.
func (Kernel) Lock(f *os.File, t Type, r Range) error {
	return onFile(f, func(fd int) error { return LockFD(fd, t, r) })
}

// Unlock is UnlockFD on f's descriptor.
func (Kernel) Unlock(f *os.File, r Range) error {
	return onFile(f, func(fd int) error { return UnlockFD(fd, r) })
}

// Conflict is ConflictFD on f's descriptor.
func (Kernel) Conflict(f *os.File, t Type, r Range) (held Lock, ok bool, err error) {
	cerr := onFile(f, func(fd int) error { held, ok, err = ConflictFD(fd, t, r); return nil })
	if cerr != nil {
		return Lock{}, false, cerr
	}
	return held, ok, err
}

// onFile runs fn on f's descriptor, which stays valid meanwhile even if
// another goroutine closes f (f.Fd would not keep it so).
func onFile(f *os.File, fn func(fd int) error) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := sc.Control(func(fd uintptr) { opErr = fn(int(fd)) }); err != nil {
		return err
	}
	return opErr
}

// TryLockFD sets a lock of type t on r through the open file description
// of fd (F_OFD_SETLK), converting in place a lock it already holds there:
// a *HeldError (ErrHeld) when another description's lock conflicts.
func TryLockFD(fd int, t Type, r Range) error {
	err := fcntl(fd, unix.F_OFD_SETLK, flock(t, r))
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return &HeldError{Op: "F_OFD_SETLK", Errno: err.(unix.Errno)} // FcntlFlock's errors are Errnos
	}
	return err
}

// LockFD is TryLockFD that waits in the kernel (F_OFD_SETLKW) while
// another description's lock conflicts.
func LockFD(fd int, t Type, r Range) error {
	return fcntl(fd, unix.F_OFD_SETLKW, flock(t, r))
}

// UnlockFD releases the locks the open file description of fd holds on r.
// Closing the description's last descriptor releases them all.
func UnlockFD(fd int, r Range) error {
	lk := flock(Read, r)
	lk.Type = unix.F_UNLCK
	return fcntl(fd, unix.F_OFD_SETLK, lk)
}

// ConflictFD reports the first lock of another open file description that
// a lock of type t on r through fd would conflict with (F_OFD_GETLK); ok
// is false when there is none. It takes no lock, and works on a
// descriptor open for reading only whatever t is.
func ConflictFD(fd int, t Type, r Range) (held Lock, ok bool, err error) {
	lk := flock(t, r)
	if err := fcntl(fd, unix.F_OFD_GETLK, lk); err != nil {
		return Lock{}, false, err
	}
	if lk.Type == unix.F_UNLCK {
		return Lock{}, false, nil
	}
	return Lock{Type: Type(lk.Type), Range: Range{Start: lk.Start, Len: lk.Len}}, true, nil
}

func flock(t Type, r Range) *unix.Flock_t {
	// Pid must be 0 for the OFD commands (EINVAL otherwise).
	return &unix.Flock_t{Type: int16(t), Whence: 0, Start: r.Start, Len: r.Len}
}

// fcntl makes one lock request, again for as long as a signal interrupts
// it: fcntl's lock requests can fail with EINTR on FUSE and NFS despite
// SA_RESTART. The loop is this package's own rather than
// durable.IgnoringEINTR: package loop locks through this one and imports
// nothing of filevol's file layer, and durable must not reach into hostos.
func fcntl(fd, cmd int, lk *unix.Flock_t) error {
	for {
		if err := unix.FcntlFlock(uintptr(fd), cmd, lk); err != unix.EINTR {
			return err
		}
	}
}
