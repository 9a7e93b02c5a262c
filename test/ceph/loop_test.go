package ceph_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
)

// A loop device configured (LOOP_CONFIGURE, through hostos/loop as filevol
// attaches) on the very open file that holds an OFD write lock keeps the
// lock for exactly as long as the device: the attaching process closes its
// own fd, node-b is still refused; once the device is detached
// (LOOP_CLR_FD), node-b gets the lock.
func TestLoopDeviceKeepsTheLock(t *testing.T) {
	testutil.RequireRoot(t)
	_, a, b := twoNodes(t)
	img := filepath.Join(a, "vol.img")
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 * mib); err != nil {
		t.Fatal(err)
	}
	if err := ofd(f, unix.F_WRLCK); err != nil {
		t.Fatalf("lock: %v", err)
	}
	d, err := loop.AttachFile(t.Context(), f, loop.Options{DirectIO: true})
	f.Close() // from here only the loop device holds the open file
	if err != nil {
		t.Fatalf("AttachFile: %v", err)
	}
	detached := false
	t.Cleanup(func() {
		if !detached {
			_ = loop.Detach(d.Path)
		}
	})
	other := open(t, filepath.Join(b, "vol.img"))
	if took, err := waitLock(other, 2*time.Second); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("node-b locked the image %s (%v) while node-a's loop device %s holds it: %v", img, took, d.Path, err)
	}
	// The device works: a block written through it is in the image.
	dev, err := os.OpenFile(d.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.WriteAt([]byte("through the loop device"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	start := time.Now()
	if err := loop.Detach(d.Path); err != nil {
		t.Fatalf("detach: %v", err)
	}
	detached = true
	took, err := waitLock(other, 10*time.Second)
	if err != nil {
		t.Fatalf("node-b still cannot lock the image %v after the detach: %v", took, err)
	}
	t.Logf("node-b got the lock %v after LOOP_CLR_FD of %s", time.Since(start).Round(time.Millisecond), d.Path)
	got := make([]byte, 23)
	if _, err := other.ReadAt(got, 4096); err != nil || string(got) != "through the loop device" {
		t.Errorf("node-b reads %q, %v", got, err)
	}
}
