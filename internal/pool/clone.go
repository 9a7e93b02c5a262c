package pool

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volume"
)

// copyChunk bounds one copy_file_range call, so a cancelled request stops
// within one chunk's time, and a page cache flood cannot build up unseen.
const copyChunk = 64 << 20

// cloneImage creates dst (mode 0600, exclusively) as a copy of the image at
// src and returns it open for the caller to fsync and close. size 0 keeps
// the source's size; a larger size grows the copy (thin: ftruncate; thick:
// fallocate over the whole file, which allocates the holes and the new
// tail but leaves shared extents shared: see thick.go for what that
// promises). The caller keeps src from changing meanwhile (per-volume
// locks, and FIFREEZE for a mounted source). On error nothing is left.
func cloneImage(ctx context.Context, src, dst string, size int64, thick bool) (fd int, engine string, err error) {
	var sfd int
	if err := durable.IgnoringEINTR(func() (err error) {
		sfd, err = unix.Open(src, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	}); err != nil {
		return -1, "", &os.PathError{Op: "open clone source", Path: src, Err: err}
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return -1, "", &os.PathError{Op: "stat clone source", Path: src, Err: err}
	}
	srcSize := st.Size
	if size == 0 {
		size = srcSize
	}
	if size < srcSize {
		return -1, "", fmt.Errorf("%w: %d bytes cannot hold the %d bytes of %s", volume.ErrInvalidArgument, size, srcSize, src)
	}
	dfd, err := durable.CreateExcl(dst)
	if err != nil {
		return -1, "", wrapNoSpace(err)
	}
	fail := func(err error) (int, string, error) {
		_ = unix.Close(dfd)
		_ = unix.Unlink(dst)
		return -1, "", wrapNoSpace(err)
	}
	engine = volume.EngineReflink
	if err := unix.IoctlFileClone(dfd, sfd); err != nil {
		if !reflinkUnsupported(err) {
			return fail(fmt.Errorf("clone %s to %s: FICLONE: %w", src, dst, err))
		}
		engine = volume.EngineCopy
		if err := copyImage(ctx, sfd, dfd, srcSize); err != nil {
			return fail(fmt.Errorf("copy %s to %s: %w", src, dst, err))
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	switch {
	case thick:
		err = durable.IgnoringEINTR(func() error { return unix.Fallocate(dfd, 0, 0, size) })
		if err == unix.EOPNOTSUPP {
			err = fmt.Errorf("%w: provisioning %q: the pool filesystem cannot preallocate (%w)",
				volume.ErrInvalidArgument, volume.ProvisioningThick, err)
		}
	case size > srcSize:
		err = durable.IgnoringEINTR(func() error { return unix.Ftruncate(dfd, size) })
	}
	if err != nil {
		return fail(fmt.Errorf("size clone %s to %d bytes: %w", dst, size, err))
	}
	return dfd, engine, nil
}

// reflinkUnsupported reports FICLONE errors that mean "not here": the pool
// filesystem cannot share extents (ext4, tmpfs, xfs without reflink: the
// copy is the way), as opposed to a failure of a clone that could work.
func reflinkUnsupported(err error) bool {
	switch err {
	case unix.EOPNOTSUPP, unix.ENOTTY, unix.EINVAL, unix.EXDEV, unix.ENOSYS:
		return true
	}
	return false
}

// copyImage copies sfd to dfd (new, empty) at the size size: copySparse,
// or copyNonZero where the filesystem does not report holes (told by
// dfd, sized first and so all hole).
func copyImage(ctx context.Context, sfd, dfd int, size int64) error {
	if size > 0 {
		if err := durable.IgnoringEINTR(func() error { return unix.Ftruncate(dfd, size) }); err != nil {
			return err
		}
		if holesUnreported(dfd) {
			return copyNonZero(ctx, sfd, dfd, size)
		}
		if err := durable.IgnoringEINTR(func() error { return unix.Ftruncate(dfd, 0) }); err != nil {
			return err
		}
	}
	return copySparse(ctx, sfd, dfd, size)
}

// copySparse copies the data ranges of sfd to the same offsets of dfd (a
// new, empty file) and sizes dfd to size. It walks SEEK_DATA/SEEK_HOLE,
// so holes are neither read nor written (a sparse 10 GiB volume must
// never cost a full read of zeros); unwritten extents of a thick source read as holes too. Each
// range moves with copy_file_range, inside the kernel.
func copySparse(ctx context.Context, sfd, dfd int, size int64) error {
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
	return durable.IgnoringEINTR(func() error { return unix.Ftruncate(dfd, size) })
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
		err := durable.IgnoringEINTR(func() (err error) {
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
		err := durable.IgnoringEINTR(func() (err error) { r, err = unix.Pread(sfd, buf[:min(n, int64(len(buf)))], off); return err })
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		if r == 0 {
			return fmt.Errorf("read at %d: source ended early (%d bytes left)", off, n)
		}
		for w := 0; w < r; {
			var k int
			err := durable.IgnoringEINTR(func() (err error) { k, err = unix.Pwrite(dfd, buf[w:r], off+int64(w)); return err })
			if err != nil {
				return fmt.Errorf("write at %d: %w", off+int64(w), err)
			}
			w += k
		}
		off, n = off+int64(r), n-int64(r)
	}
	return nil
}
