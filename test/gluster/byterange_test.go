package gluster_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil/gluster"
)

// What the attachment locks (internal/attach/lock.go: one byte per volume
// of one permanent file, never unlinked) need from GlusterFS: a client's
// OFD write lock on a byte refuses another client's lock on that byte,
// leaves the bytes around it free, also at offsets near the top of the
// range the locks use, and a request waiting for the byte is granted
// when the holder closes its file.
func TestByteRangeLocksAcrossClients(t *testing.T) {
	g := gluster.Start(t)
	a, b := g.MountNode(t, "node-a"), g.MountNode(t, "node-b")
	open := func(dir string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, "locks"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	lock := func(f *os.File, cmd int, off int64) error {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: off, Len: 1}
		return unix.FcntlFlock(f.Fd(), cmd, &lk)
	}
	for _, off := range []int64{0, 4242, 1<<40 - 1} {
		holder, other := open(a), open(b)
		if err := lock(holder, unix.F_OFD_SETLK, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if err := lock(other, unix.F_OFD_SETLK, off); !errors.Is(err, unix.EAGAIN) {
			t.Errorf("offset %d held through the other client: %v, want EAGAIN", off, err)
		}
		for _, next := range []int64{off + 1, max(off-1, 1<<20)} {
			if err := lock(other, unix.F_OFD_SETLK, next); err != nil {
				t.Errorf("offset %d beside the held %d: %v", next, off, err)
			}
		}
		granted := make(chan error, 1)
		go func() { granted <- lock(other, unix.F_OFD_SETLKW, off) }()
		select {
		case err := <-granted:
			t.Fatalf("offset %d: a waiting request granted beside the holder: %v", off, err)
		case <-time.After(500 * time.Millisecond):
		}
		holder.Close()
		select {
		case err := <-granted:
			if err != nil {
				t.Errorf("offset %d: the waiting request after the holder closed: %v", off, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("offset %d: the waiting request still waits 10 s after the holder closed", off)
		}
		other.Close()
	}
}
