package pool

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/aiofsync"
)

// The hot paths (create, delete) call golang.org/x/sys/unix directly rather
// than os: os.OpenFile adds an epoll registration attempt and os.File a
// finalizer, and every syscall counts against the create latency budget.

// ignoringEINTR retries fn while it fails with EINTR (possible on FUSE and
// NFS pools despite SA_RESTART).
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// createExcl creates path (mode 0600) for writing. A file already there can
// only be a stale temporary file of an operation that crashed (callers
// serialise per volume), so it is removed and the create retried once.
func createExcl(path string) (int, error) {
	for attempt := 0; ; attempt++ {
		var fd int
		err := ignoringEINTR(func() (err error) {
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

// writeAll writes data to fd, looping on short writes.
func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		var n int
		err := ignoringEINTR(func() (err error) { n, err = unix.Write(fd, data); return err })
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// fsync is fsync(2), submitted through AIO so that a create waiting for
// its record does not hold an OS thread (internal/aiofsync says why).
func fsync(fd int) error { return aiofsync.Fsync(fd) }

// renameNoReplace renames old to new unless new exists (EEXIST). It makes
// the record rename an atomic "create if absent", so a duplicate create can
// never overwrite a committed record, and an image rename that can never
// overwrite data. Filesystems without RENAME_NOREPLACE (some FUSE and NFS)
// get link+unlink, which is just as exclusive.
func renameNoReplace(old, new string) error {
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

// isNoSpace reports errors that mean the pool cannot hold the volume. EFBIG:
// the filesystem cannot hold a file that large at all.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG)
}

// wrapNoSpace makes err match ErrNoSpace when it is one of isNoSpace.
func wrapNoSpace(err error) error {
	if err != nil && isNoSpace(err) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}
