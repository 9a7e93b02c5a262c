// Package marker writes what a pod writes to a block volume in the tests
// of shared pools, and reads it back where the storage keeps it: 4 KiB
// markers, each a text repeated, written O_DIRECT through a device and
// fsynced. O_DIRECT keeps the block out of the writing host's page cache
// and the fsync makes a loop device flush its backing file, so the result
// says what the device and the filesystem under it did, and a marker found
// in the image (read by a client other than the writer's) has reached the
// storage.
package marker

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/test/errno"
)

// Size is a marker's size: one block of the loop devices and of the
// filesystems under them, the unit O_DIRECT writes in.
const Size = 4096

// Block is the offset of the n-th marker-sized block.
func Block(n int64) int64 { return n * Size }

// Of is text's marker: text and a '|' repeated to Size bytes.
func Of(text string) []byte {
	return bytes.Repeat([]byte(text+"|"), Size/(len(text)+1)+1)[:Size]
}

// Result is what one marker write got: pwrite's and fsync's errors, and
// how long both took together.
type Result struct {
	Write, Sync error
	Took        time.Duration
}

// OK reports whether both the write and the flush succeeded.
func (r Result) OK() bool { return r.Write == nil && r.Sync == nil }

func (r Result) String() string {
	return fmt.Sprintf("pwrite: %s, fsync: %s, in %v", errno.Name(r.Write), errno.Name(r.Sync), r.Took.Round(time.Millisecond))
}

// Write writes text's marker at off of dev, opened O_DIRECT, and fsyncs
// the device. A device that does not open gives that error as Write's,
// with Sync nil: nothing was flushed.
func Write(dev string, off int64, text string) Result {
	buf := aligned(Size)
	copy(buf, Of(text))
	start := time.Now()
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return Result{Write: err, Took: time.Since(start)}
	}
	defer unix.Close(fd)
	var r Result
	_, r.Write = unix.Pwrite(fd, buf, off)
	r.Sync = unix.Fsync(fd)
	r.Took = time.Since(start)
	return r
}

// Holds reports whether the Size bytes at off of path (an image as the
// storage holds it, or a device) are text's marker. A path that cannot be
// read there fails the test: a marker's absence must not hide a broken
// reader.
func Holds(t testing.TB, path string, off int64, text string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, Size)
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatalf("read %s at %d: %v", path, off, err)
	}
	return bytes.Equal(got, Of(text))
}

// aligned returns n bytes at a Size-aligned address, as O_DIRECT needs.
func aligned(n int) []byte {
	buf := make([]byte, n+Size)
	off := (Size - int(uintptr(unsafe.Pointer(&buf[0]))%Size)) % Size
	return buf[off : off+n]
}

// WriteAsync runs Write in a goroutine of its own and returns at once:
// through a cut-off client a write may hang until the client gives up,
// and the test goes on meanwhile to what the other node does. The result
// arrives on the channel.
func WriteAsync(dev string, off int64, text string) <-chan Result {
	ch := make(chan Result, 1)
	go func() { ch <- Write(dev, off, text) }()
	return ch
}
