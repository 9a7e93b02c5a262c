package pool

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/hostos/sparse"
	"github.com/filevol/filevol/internal/volume"
)

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
		if err := sparse.Copy(ctx, sfd, dfd, srcSize); err != nil {
			return fail(fmt.Errorf("copy %s to %s: %w", src, dst, err))
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	switch {
	case thick:
		err = preallocate(dfd, 0, size)
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
