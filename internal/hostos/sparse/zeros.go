package sparse

import (
	"bytes"
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// A filesystem that does not report holes to SEEK_DATA/SEEK_HOLE answers
// as if every byte were data: ceph-fuse (FUSE without an lseek of its
// own, so the kernel's generic answer) says SEEK_DATA 0 is 0 and
// SEEK_HOLE 0 is the end of the file, however sparse. copyData would
// then copy every zero of a thin image and allocate all of it: a 256 MiB
// image holding 4 MiB took 268 MiB of the CephFS data pool after the
// copy (measured on Ceph 16.2, docs/shared-pools-cephfs.md). On such a
// filesystem the copy reads the source and writes only what is not
// zeros, leaving holes: it costs a read of the whole image (holes of a
// CephFS file read at 580-700 MiB/s here) instead of its allocation.

// zeroScan is the read size of copyNonZero (CephFS's default object
// size); zeroBlock the granularity at which zeros are left as holes.
const (
	zeroScan  = 4 << 20
	zeroBlock = 64 << 10
)

var zeros = make([]byte, zeroBlock)

// holesUnreported reports whether the file fd, sized but never written
// (all of it a hole), still reads as data at 0 through SEEK_DATA: its
// filesystem does not report holes. A filesystem that does answers ENXIO;
// one without SEEK_DATA at all answers EINVAL and keeps copyData's
// whole copy.
func holesUnreported(fd int) bool {
	off, err := unix.Seek(fd, 0, unix.SEEK_DATA)
	return err == nil && off == 0
}

// copyNonZero copies sfd to dfd (a new file already sized to size, all
// hole) block by block, writing only the blocks of zeroBlock bytes that
// are not all zeros, so that the copy stays as thin as its source.
func copyNonZero(ctx context.Context, sfd, dfd int, size int64) error {
	_ = unix.Fadvise(sfd, 0, 0, unix.FADV_SEQUENTIAL)
	buf := make([]byte, zeroScan)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int(min(int64(len(buf)), size-off))
		var r int
		err := retry(func() (err error) { r, err = unix.Pread(sfd, buf[:n], off); return err })
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		if r == 0 {
			return fmt.Errorf("read at %d: source ended early (%d bytes left)", off, size-off)
		}
		if err := writeNonZero(dfd, buf[:r], off); err != nil {
			return err
		}
		off += int64(r)
	}
	return nil
}

// writeNonZero writes the runs of b's zeroBlock blocks that are not all
// zeros at their offsets from off.
func writeNonZero(dfd int, b []byte, off int64) error {
	for i := 0; i < len(b); {
		end := min(i+zeroBlock, len(b))
		if bytes.Equal(b[i:end], zeros[:end-i]) {
			i = end
			continue
		}
		j := end // extend the run over the blocks that follow with data
		for j < len(b) {
			k := min(j+zeroBlock, len(b))
			if bytes.Equal(b[j:k], zeros[:k-j]) {
				break
			}
			j = k
		}
		if err := writeAll(dfd, b[i:j], off+int64(i)); err != nil {
			return err
		}
		i = j
	}
	return nil
}
