package multinode

import (
	"bytes"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A pod's writes to a block volume: 4 KiB markers, each a text repeated,
// written O_DIRECT through the device the pod sees (the target path, a
// bind of the node's loop device) and fsynced, so that nothing waits in
// the node's page cache and the result says what the device did.

func marker(text string) []byte {
	return bytes.Repeat([]byte(text+"|"), 4096/(len(text)+1)+1)[:4096]
}

// blockWrite is what one marker write got: pwrite's and fsync's errors.
type blockWrite struct{ write, sync error }

func (w blockWrite) ok() bool { return w.write == nil && w.sync == nil }

func (w blockWrite) String() string { return "pwrite " + errno(w.write) + ", fsync " + errno(w.sync) }

// writeMarker writes text's marker at block blk of dev.
func writeMarker(dev string, blk int64, text string) blockWrite {
	buf := aligned(4096)
	copy(buf, marker(text))
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return blockWrite{write: err, sync: err}
	}
	defer unix.Close(fd)
	var w blockWrite
	_, w.write = unix.Pwrite(fd, buf, blk*4096)
	w.sync = unix.Fsync(fd)
	return w
}

// readMarker reports whether block blk of path (an image in the storage,
// or a device) holds text's marker.
func holdsMarker(t *testing.T, path string, blk int64, text string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, 4096)
	if _, err := f.ReadAt(got, blk*4096); err != nil {
		t.Fatalf("read %s block %d: %v", path, blk, err)
	}
	return bytes.Equal(got, marker(text))
}

// aligned returns n bytes aligned for O_DIRECT.
func aligned(n int) []byte {
	buf := make([]byte, n+4096)
	off := int(4096 - uintptr(unsafe.Pointer(&buf[0]))%4096)
	if off == 4096 {
		off = 0
	}
	return buf[off : off+n]
}
