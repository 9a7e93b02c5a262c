package fake

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/ofd"
)

// Locks is a fake kernel's OFD locks: an ofd.Locker that keeps the locks
// in memory, for tests of a caller's locking without another process or
// another host. It keeps the rules filevol depends on:
//   - a lock belongs to the open file description it was taken through:
//     each *os.File is one (the fake cannot see a dup of its descriptor),
//     so two opens of one file conflict, in one process as in two;
//   - files are told apart by identity (device and inode), not by name;
//   - a write lock conflicts with any other description's lock on the
//     bytes it covers, read locks with write locks only; a description's
//     new lock replaces its own on those bytes in place, and its adjacent
//     locks of one type merge, as the kernel's do;
//   - closing the *os.File releases its locks (the fake sees the close at
//     its next call, which is when anyone could tell);
//   - Lock waits while a conflicting lock is held, Conflict reports one
//     and takes nothing, and neither sees the caller's own locks;
//   - a read lock needs the file open for reading, a write lock for
//     writing (EBADF), and a closed file is refused as the kernel's
//     Locker refuses it.
//
// Other hosts' locks, which a shared filesystem's server enforces, are
// HoldElsewhere's. The only system calls it makes are fstat(2) and
// fcntl(F_GETFL) on the test's own files.
type Locks struct {
	mu    sync.Mutex
	files map[fileID][]lockSeg
	opLog
	// elsewhere numbers the holders HoldElsewhere makes.
	elsewhere int
}

// fileID is a file's identity, as the kernel keys its locks.
type fileID struct{ dev, ino uint64 }

var _ ofd.Locker = (*Locks)(nil)

// NewLocks returns a fake with no lock held.
func NewLocks() *Locks {
	l := &Locks{files: map[fileID][]lockSeg{}}
	l.opLog.mu = &l.mu
	return l
}

// Fail makes every later call of op ("TryLock", "Lock", "Unlock",
// "Conflict") fail with err before it changes anything: ENOLCK or
// EOPNOTSUPP for a filesystem without locks, ESTALE for a file another
// client replaced. A nil err clears it.
func (l *Locks) Fail(op string, err error) { l.setFail(op, failure{err: err}) }

// FailOnce makes the next call of op fail with err.
func (l *Locks) FailOnce(op string, err error) { l.setFail(op, failure{err: err, once: true}) }

// Log returns the calls made so far, one line each ("TryLock write
// [0,end) /pool/x"); a failed one ends with ": " and the error.
func (l *Locks) Log() []string { return l.lines() }

// TryLock sets a lock or fails at once with an *ofd.HeldError (EAGAIN).
func (l *Locks) TryLock(f *os.File, t ofd.Type, r ofd.Range) error {
	return l.set(f, "TryLock", t, r, false)
}

// Lock sets a lock, waiting while another description's conflicts.
func (l *Locks) Lock(f *os.File, t ofd.Type, r ofd.Range) error {
	return l.set(f, "Lock", t, r, true)
}

// Unlock releases f's locks on r.
func (l *Locks) Unlock(f *os.File, r ofd.Range) error {
	return l.set(f, "Unlock", ofd.Read, r, false)
}

// Conflict reports a lock of another description that a lock of type t
// on r through f would conflict with.
func (l *Locks) Conflict(f *os.File, t ofd.Type, r ofd.Range) (held ofd.Lock, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.begin("Conflict", t, r, f.Name()); err != nil {
		return ofd.Lock{}, false, err
	}
	id, want, err := l.check(f, "Conflict", t, r)
	if err != nil {
		return ofd.Lock{}, false, l.done(err)
	}
	if c, found := l.conflict(id, want); found {
		return c.lock(), true, nil
	}
	return ofd.Lock{}, false, nil
}

// HoldElsewhere holds a lock of type t on r of the file at path for a
// description this process does not have: another host's, on a
// filesystem whose server enforces locks between its clients, or another
// process's. It fails as TryLock does when a lock conflicts; release lets
// go of it, as that holder's close or death would.
func (l *Locks) HoldElsewhere(path string, t ofd.Type, r ofd.Range) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, err := l.fileAt(path)
	if err != nil {
		return nil, err
	}
	l.elsewhere++
	want := lockSeg{elsewhere: l.elsewhere, typ: t}
	if want.start, want.end, err = bounds("HoldElsewhere", t, r); err != nil {
		return nil, err
	}
	if _, found := l.conflict(id, want); found {
		return nil, &ofd.HeldError{Op: "F_OFD_SETLK", Errno: unix.EAGAIN}
	}
	l.apply(id, want)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.files[id] = slices.DeleteFunc(l.files[id], want.sameOwner)
	}, nil
}

// Held returns the locks held on the file at path, by every holder, in
// order of their start.
func (l *Locks) Held(path string) ([]ofd.Lock, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, err := l.fileAt(path)
	if err != nil {
		return nil, err
	}
	var out []ofd.Lock
	for _, s := range l.files[id] {
		out = append(out, s.lock())
	}
	slices.SortFunc(out, func(a, b ofd.Lock) int { return cmp.Compare(a.Range.Start, b.Range.Start) })
	return out, nil
}

func (l *Locks) set(f *os.File, op string, t ofd.Type, r ofd.Range, wait bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.begin(op, t, r, f.Name()); err != nil {
		return err
	}
	for {
		id, want, err := l.check(f, op, t, r)
		if err != nil {
			return l.done(err)
		}
		if op == "Unlock" {
			l.remove(id, want)
			return nil
		}
		if _, found := l.conflict(id, want); !found {
			l.apply(id, want)
			return nil
		}
		if !wait {
			return l.done(&ofd.HeldError{Op: "F_OFD_SETLK", Errno: unix.EAGAIN})
		}
		// The holder's unlock or close lets us in; a close is seen only
		// by looking again.
		l.mu.Unlock()
		time.Sleep(time.Millisecond)
		l.mu.Lock()
	}
}

// check validates the request op through f as the kernel would and
// returns the file and the lock asked for; it drops the locks of
// descriptions closed since. Held: l.mu.
func (l *Locks) check(f *os.File, op string, t ofd.Type, r ofd.Range) (fileID, lockSeg, error) {
	want := lockSeg{f: f, typ: t}
	var flags int
	sc, err := f.SyscallConn()
	if err == nil {
		// A closed file fails here, as it does for ofd.Kernel.
		err = sc.Control(func(fd uintptr) { flags, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	}
	if err != nil {
		return fileID{}, want, err
	}
	if want.start, want.end, err = bounds(op, t, r); err != nil {
		return fileID{}, want, err
	}
	// Setting a lock needs the access it stands for; asking, or letting
	// go, needs none.
	if acc := flags & unix.O_ACCMODE; (op == "TryLock" || op == "Lock") && (t == ofd.Read && acc == unix.O_WRONLY || t == ofd.Write && acc == unix.O_RDONLY) {
		return fileID{}, want, unix.EBADF
	}
	st, err := f.Stat()
	if err != nil {
		return fileID{}, want, err
	}
	id := idOf(st)
	l.prune(id)
	return id, want, nil
}

// fileAt returns the identity of the file at path, with the locks of its
// descriptions closed since dropped. Held: l.mu.
func (l *Locks) fileAt(path string) (fileID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := idOf(st)
	l.prune(id)
	return id, nil
}

// prune drops the locks of descriptions closed since: the kernel drops
// them at the close.
func (l *Locks) prune(id fileID) {
	l.files[id] = slices.DeleteFunc(l.files[id], func(s lockSeg) bool { return s.f != nil && closed(s.f) })
}

func closed(f *os.File) bool {
	sc, err := f.SyscallConn()
	return err != nil || sc.Control(func(uintptr) {}) != nil
}

func idOf(st os.FileInfo) fileID {
	sys, _ := st.Sys().(*syscall.Stat_t)
	if sys == nil {
		return fileID{}
	}
	return fileID{dev: uint64(sys.Dev), ino: sys.Ino}
}

// begin logs a call and returns its injected error, if any. Held: l.mu.
func (l *Locks) begin(op string, t ofd.Type, r ofd.Range, name string) error {
	line := fmt.Sprintf("%s %v %v %s", op, t, r, name)
	if op == "Unlock" {
		line = fmt.Sprintf("%s %v %s", op, r, name)
	}
	return l.record(op, line)
}
