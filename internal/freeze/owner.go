package freeze

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/ofd"
)

// A request names its owner: a file <dir>/.owner-<token> that the
// requesting process holds an OFD write lock on for as long as it lives.
// The kernel drops the lock when the process dies, however it dies, so
// anyone can tell a live controller's request from a dead one's by trying
// the lock — without waiting for the request's lease to run out. OFD
// locks, not flock: they are exclusive across the clients of a shared
// filesystem (NFS, GlusterFS), where flock may be local to one host.
const ownerPrefix = ".owner-"

// ownerTmpSuffix ends the temporary name of an owner file being made: its
// owner has no .owner- file yet, so only age makes it garbage.
const ownerTmpSuffix = ".owner"

// owner is the lock this process holds while it makes requests.
type owner struct {
	once sync.Once
	name string
	f    *os.File
	err  error
}

// get makes and locks the owner file at first use.
func (o *owner) get(dir string) (string, error) {
	o.once.Do(func() {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			o.err = fmt.Errorf("freeze requests: %w", err)
			return
		}
		// The owner files of processes that are gone go first (one is left
		// by every process killed before it could remove its own).
		removeDeadOwners(dir)
		// Locked before it appears under its name: a file named .owner-*
		// whose lock is free is a dead owner's, and anyone may remove it.
		token := newToken()
		name := ownerPrefix + token
		f, err := lockedTmpfile(dir, filepath.Join(dir, name))
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			f, err = lockedRenamed(dir, token, filepath.Join(dir, name)) // no O_TMPFILE here
		}
		if err != nil {
			o.err = fmt.Errorf("freeze requests: owner lock: %w", err)
			return
		}
		o.name, o.f = name, f // held open, and locked, for the process's life
	})
	return o.name, o.err
}

// lockedTmpfile makes the owner file as an unnamed file (O_TMPFILE),
// locks it and only then links it into place: a process killed at any
// instant leaves either nothing or a locked, named file.
func lockedTmpfile(dir, path string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	if err = lockOFD(f); err == nil {
		err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockedRenamed is lockedTmpfile for filesystems without O_TMPFILE: a
// named temporary file, locked, then renamed; a kill in between leaves the
// temporary file, which removeOldTemp removes once it is old.
func lockedRenamed(dir, token, path string) (*os.File, error) {
	tmp := filepath.Join(dir, tmpPrefix+token+ownerTmpSuffix)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err = lockOFD(f); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	return f, nil
}

// close releases the lock and removes the owner file.
func (o *owner) close(dir string) error {
	if o.f == nil {
		return nil
	}
	_ = os.Remove(filepath.Join(dir, o.name))
	return o.f.Close()
}

// lockOFD takes the owner lock through f, without waiting: an OFD write
// lock over the whole file, held until f's description is closed.
func lockOFD(f *os.File) error { return ofd.Kernel{}.TryLock(f, ofd.Write, ofd.Whole) }

// ownerAlive reports whether the process that owns name still holds its
// lock. A missing owner file is a dead owner.
func ownerAlive(dir, name string) bool {
	if name == "" || !strings.HasPrefix(name, ownerPrefix) || strings.Contains(name, "/") {
		return false
	}
	// Read-only: F_OFD_GETLK needs no write access, and closing a file
	// opened for writing is an IN_CLOSE_WRITE event, which woke every
	// agent watching the directory, whose sweep probed the owners again:
	// agents swept without pause while any request was out.
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true // cannot tell: never take a live freeze for dead
	}
	defer f.Close()
	return lockHeld(f)
}

// lockHeld reports whether an open file description other than f holds a
// lock on f's file: the owner's, as nobody else ever locks an owner file.
//
// It asks (F_OFD_GETLK) and never takes the lock itself. A probe that took
// it (F_OFD_SETLK, released with the close) would hold a dead owner's lock
// between its lock and its close, and a probe overlapping it — the node's
// sweep and the next controller's publish look at one request at once —
// would take that for the owner's and the dead request for a live one
// (ErrBusy to the retry that should replace it).
func lockHeld(f *os.File) bool {
	_, held, err := ofd.Kernel{}.Conflict(f, ofd.Write, ofd.Whole)
	if err != nil {
		return true // cannot tell: never take a live freeze for dead
	}
	return held
}

// removeDeadOwners removes the owner files of processes that are gone.
func removeDeadOwners(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, de := range entries {
		if name := de.Name(); strings.HasPrefix(name, ownerPrefix) && !ownerAlive(dir, name) {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
}

// removeStale removes the requests whose controller is gone or whose
// lease ran out, and the answers to them. Only a controller calls it:
// controllers act on a volume one at a time (the CO's leader, the
// volume's lock), so no request it removes is being replaced meanwhile.
func removeStale(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, de := range entries {
		if id, ok := volumeOf(de.Name(), reqSuffix); ok {
			var req request
			if ok, err := readJSON(reqPath(dir, id), &req); ok && err == nil && stale(dir, req) {
				_ = os.Remove(reqPath(dir, id))
			}
		}
	}
	// An answer outlives its request only when its controller died: the
	// node drops the answers it holds a freeze for when it thaws.
	entries, _ = os.ReadDir(dir)
	for _, de := range entries {
		if id, ok := volumeOf(de.Name(), ackSuffix); ok {
			if _, err := os.Lstat(reqPath(dir, id)); errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(ackPath(dir, id))
			}
		}
	}
}

// removeOldTemp removes the temporary files that killed processes left
// between writing one and renaming it: those whose writer's owner lock is
// free, and any older than age.
func removeOldTemp(dir string, age time.Duration) {
	entries, _ := os.ReadDir(dir)
	for _, de := range entries {
		rest, ok := strings.CutPrefix(de.Name(), tmpPrefix)
		if !ok {
			continue
		}
		token, _, _ := strings.Cut(rest, ".")
		dead := !strings.HasSuffix(rest, ownerTmpSuffix) && !ownerAlive(dir, ownerPrefix+token)
		if fi, err := de.Info(); err == nil && (dead || time.Since(fi.ModTime()) > age) {
			_ = os.Remove(filepath.Join(dir, de.Name()))
		}
	}
}
