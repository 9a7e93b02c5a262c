// Package sparse copies a file's bytes into a new file and keeps it as thin
// as its source: holes are neither read nor written where the filesystem
// reports them (SEEK_DATA/SEEK_HOLE), and blocks of zeros are left as holes
// where it does not (ceph-fuse). It is the one owner of that copy: the
// image pool copies images with it (snapshots, restores, clones of a copy
// pool), the directory pool the files of a restore or clone.
package sparse

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// copyChunk bounds one copy_file_range call, so a cancelled copy stops
// within one chunk's time, and a page cache flood cannot build up unseen.
const copyChunk = 64 << 20

// probeMin: a file of at most this size is copied by its data ranges
// without asking whether its filesystem reports holes. A hole in it saves
// little, and the question costs two truncates, each a round trip to the
// metadata server on a network filesystem (a tree of small files pays it
// per file).
const probeMin = 1 << 20

// Copy copies size bytes of sfd to the same offsets of dfd (a new, empty
// file) and sizes dfd to size. The bytes move with copy_file_range, inside
// the kernel (on CephFS the OSDs copy the objects without the data passing
// through the client), or through a buffer where the kernel refuses it.
// ctx is checked between chunks.
func Copy(ctx context.Context, sfd, dfd int, size int64) error {
	if size > probeMin {
		if err := retry(func() error { return unix.Ftruncate(dfd, size) }); err != nil {
			return err
		}
		if holesUnreported(dfd) {
			return copyNonZero(ctx, sfd, dfd, size)
		}
		if err := retry(func() error { return unix.Ftruncate(dfd, 0) }); err != nil {
			return err
		}
	}
	return copyData(ctx, sfd, dfd, size)
}

// copyData copies the data ranges of sfd to the same offsets of dfd and
// sizes dfd to size. It walks SEEK_DATA/SEEK_HOLE, so holes are neither
// read nor written (a sparse 10 GiB volume must never cost a full read of
// zeros); unwritten extents of a thick source read as holes too.
func copyData(ctx context.Context, sfd, dfd int, size int64) error {
	// A sequential reader: the kernel doubles its readahead window.
	_ = unix.Fadvise(sfd, 0, 0, unix.FADV_SEQUENTIAL)
	for off := int64(0); off < size; {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole is left
		}
		hole := size
		if err == unix.EINVAL {
			// No SEEK_DATA on this filesystem: all of it is data.
			data = off
		} else if err != nil {
			return fmt.Errorf("SEEK_DATA at %d: %w", off, err)
		} else if hole, err = unix.Seek(sfd, data, unix.SEEK_HOLE); err != nil {
			return fmt.Errorf("SEEK_HOLE at %d: %w", data, err)
		}
		hole = min(hole, size)
		if err := copyRange(ctx, sfd, dfd, data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return retry(func() error { return unix.Ftruncate(dfd, size) })
}

// copyRange copies n bytes at off from sfd to dfd, in chunks so that ctx
// is honoured; copy_file_range falls back to pread/pwrite where the
// kernel refuses it.
func copyRange(ctx context.Context, sfd, dfd int, off, n int64) error {
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		roff, woff := off, off
		var done int
		err := retry(func() (err error) {
			done, err = unix.CopyFileRange(sfd, &roff, dfd, &woff, int(min(n, copyChunk)), 0)
			return err
		})
		switch {
		case err == unix.ENOSYS || err == unix.EXDEV || err == unix.EOPNOTSUPP || err == unix.EINVAL:
			return copyRangeRW(ctx, sfd, dfd, off, n)
		case err != nil:
			return fmt.Errorf("copy_file_range at %d: %w", off, err)
		case done == 0:
			return fmt.Errorf("copy_file_range at %d: source ended early (%d bytes left)", off, n)
		}
		off, n = off+int64(done), n-int64(done)
	}
	return nil
}

// copyRangeRW is copyRange through a buffer, for kernels and filesystems
// without copy_file_range.
func copyRangeRW(ctx context.Context, sfd, dfd int, off, n int64) error {
	buf := make([]byte, min(n, 1<<20))
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		var r int
		err := retry(func() (err error) { r, err = unix.Pread(sfd, buf[:min(n, int64(len(buf)))], off); return err })
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		if r == 0 {
			return fmt.Errorf("read at %d: source ended early (%d bytes left)", off, n)
		}
		if err := writeAll(dfd, buf[:r], off); err != nil {
			return err
		}
		off, n = off+int64(r), n-int64(r)
	}
	return nil
}

// writeAll writes b at off, however many writes it takes.
func writeAll(dfd int, b []byte, off int64) error {
	for w := 0; w < len(b); {
		var k int
		err := retry(func() (err error) { k, err = unix.Pwrite(dfd, b[w:], off+int64(w)); return err })
		if err != nil {
			return fmt.Errorf("write at %d: %w", off+int64(w), err)
		}
		w += k
	}
	return nil
}

// retry calls f again while it is interrupted by a signal (EINTR).
func retry(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
