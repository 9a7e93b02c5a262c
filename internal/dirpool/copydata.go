package dirpool

import (
	"bytes"
	"fmt"

	"golang.org/x/sys/unix"
)

// copyChunk bounds one copy_file_range call.
const copyChunk = 64 << 20

// copyData copies the data ranges of sfd (size bytes) to the same
// offsets of the new, empty dfd and sizes dfd to size: holes are neither
// read nor written. copy_file_range moves the bytes (on CephFS, the OSDs
// copy the objects without the data passing through the client); where
// the kernel refuses it, a buffer does. A filesystem that reports no
// holes (ceph-fuse: SEEK_DATA finds data everywhere) gets copyNonZero
// for a file larger than sparseMin instead, or every hole would be
// written as zeros.
func copyData(sfd, dfd int, size int64) error {
	if size > sparseMin && holesUnreported(dfd, size) {
		return copyNonZero(sfd, dfd, size)
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole is left
		}
		end := size
		switch {
		case err == unix.EINVAL:
			data = off // no SEEK_DATA here: all of it is data
		case err != nil:
			return fmt.Errorf("SEEK_DATA at %d: %w", off, err)
		default:
			if end, err = unix.Seek(sfd, data, unix.SEEK_HOLE); err != nil {
				return fmt.Errorf("SEEK_HOLE at %d: %w", data, err)
			}
		}
		end = min(end, size)
		if err := copySpan(sfd, dfd, data, end-data); err != nil {
			return err
		}
		off = end
	}
	return unix.Ftruncate(dfd, size)
}

// copySpan copies n bytes at off from sfd to dfd.
func copySpan(sfd, dfd int, off, n int64) error {
	for n > 0 {
		roff, woff := off, off
		done, err := unix.CopyFileRange(sfd, &roff, dfd, &woff, int(min(n, copyChunk)), 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOSYS || err == unix.EXDEV || err == unix.EOPNOTSUPP || err == unix.EINVAL:
			return copySpanRW(sfd, dfd, off, n)
		case err != nil:
			return fmt.Errorf("copy_file_range at %d: %w", off, err)
		case done == 0:
			return fmt.Errorf("copy_file_range at %d: the source ended early (%d bytes left)", off, n)
		}
		off, n = off+int64(done), n-int64(done)
	}
	return nil
}

// copySpanRW is copySpan through a buffer.
func copySpanRW(sfd, dfd int, off, n int64) error {
	buf := make([]byte, min(n, 1<<20))
	for n > 0 {
		r, err := unix.Pread(sfd, buf[:min(n, int64(len(buf)))], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil || r == 0 {
			return fmt.Errorf("read at %d: %d bytes, %v", off, r, err)
		}
		for w := 0; w < r; {
			k, err := unix.Pwrite(dfd, buf[w:r], off+int64(w))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("write at %d: %w", off+int64(w), err)
			}
			w += k
		}
		off, n = off+int64(r), n-int64(r)
	}
	return nil
}

// sparseMin: files up to this size are copied whole; a hole in them
// saves little, and the probe for one costs two calls.
const sparseMin = 1 << 20

// holesUnreported reports whether dfd's filesystem reports holes: dfd
// (new, empty) is sized to size, all of it a hole, and asked where its
// data starts; then emptied again.
func holesUnreported(dfd int, size int64) bool {
	if unix.Ftruncate(dfd, size) != nil {
		return false
	}
	data, err := unix.Seek(dfd, 0, unix.SEEK_DATA)
	_ = unix.Ftruncate(dfd, 0)
	return err == nil && data == 0
}

// zeroBlock is the unit copyNonZero reads and skips when it is zeros:
// CephFS's object size, the unit it allocates.
const zeroBlock = 4 << 20

// copyNonZero reads sfd a block at a time and writes the blocks that are
// not all zeros, then sizes dfd: the skipped blocks stay holes. It costs
// a read of the whole file through the client.
func copyNonZero(sfd, dfd int, size int64) error {
	buf := make([]byte, min(size, zeroBlock))
	for off := int64(0); off < size; {
		r, err := unix.Pread(sfd, buf[:min(size-off, int64(len(buf)))], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil || r == 0 {
			return fmt.Errorf("read at %d: %d bytes, %v", off, r, err)
		}
		if !allZero(buf[:r]) {
			for w := 0; w < r; {
				k, err := unix.Pwrite(dfd, buf[w:r], off+int64(w))
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					return fmt.Errorf("write at %d: %w", off+int64(w), err)
				}
				w += k
			}
		}
		off += int64(r)
	}
	return unix.Ftruncate(dfd, size)
}

// allZero: every byte equals the one before it and the first is 0 (one
// memequal over the block, not a loop per byte).
func allZero(b []byte) bool {
	return len(b) == 0 || b[0] == 0 && bytes.Equal(b[1:], b[:len(b)-1])
}
