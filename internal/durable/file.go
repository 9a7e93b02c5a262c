package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/aiofsync"
)

// The hot paths (a volume's create and delete) call golang.org/x/sys/unix
// directly rather than os: os.OpenFile adds an epoll registration attempt
// and os.File a finalizer, and every syscall counts against the create
// latency budget.

// IgnoringEINTR retries fn while it fails with EINTR (possible on FUSE and
// NFS despite SA_RESTART).
func IgnoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// CreateExcl creates path (mode 0600) for writing. A file already there can
// only be a stale temporary file of an operation that crashed (callers
// serialise per name), so it is removed and the create retried once.
func CreateExcl(path string) (int, error) {
	for attempt := 0; ; attempt++ {
		var fd int
		err := IgnoringEINTR(func() (err error) {
			fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
			return err
		})
		if err == unix.EEXIST && attempt == 0 {
			if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
				return -1, &os.PathError{Op: "remove stale", Path: path, Err: err}
			}
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "create", Path: path, Err: err}
		}
		return fd, nil
	}
}

// WriteAll writes data to fd, looping on short writes.
func WriteAll(fd int, data []byte) error {
	for len(data) > 0 {
		var n int
		err := IgnoringEINTR(func() (err error) { n, err = unix.Write(fd, data); return err })
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Fsync is fsync(2), submitted through AIO so that a create waiting for
// its record does not hold an OS thread (internal/aiofsync says why).
func Fsync(fd int) error { return aiofsync.Fsync(fd) }

// RenameNoReplace renames old to new unless new exists (EEXIST). It makes
// a record's rename an atomic "create if absent", so a duplicate create can
// never overwrite a committed record, and an image's rename one that can
// never overwrite data. Filesystems without RENAME_NOREPLACE (some FUSE and
// NFS) get link+unlink, which is just as exclusive.
func RenameNoReplace(old, new string) error {
	err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_NOREPLACE)
	if err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
		if err = unix.Link(old, new); err == nil {
			err = unix.Unlink(old)
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: old, New: new, Err: err}
	}
	return nil
}

// OpenDir opens dir for fsync(2) (and nothing else).
func OpenDir(dir string) (int, error) {
	var fd int
	err := IgnoringEINTR(func() (err error) {
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, nil
}

// SyncDir fsyncs a directory by path, for the rare paths (open, quarantine,
// markers) that are not worth holding a descriptor for.
func SyncDir(dir string) error {
	fd, err := OpenDir(dir)
	if err != nil {
		return err
	}
	err = Fsync(fd)
	_ = unix.Close(fd)
	if err != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}

// EnsureDir makes dir with mode 0700 if missing, durably: the parent is
// fsynced, or a crash could lose the directory and every file made in it.
// An existing directory is left as it is (an operator may have chosen
// other permissions).
func EnsureDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, os.ErrExist) {
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		// Parent missing: make it the same way (MkdirAll would not fsync).
		if err := EnsureDir(filepath.Dir(dir)); err != nil {
			return err
		}
		err = os.Mkdir(dir, 0o700)
	}
	if err != nil {
		return err
	}
	return SyncDir(filepath.Dir(dir))
}
