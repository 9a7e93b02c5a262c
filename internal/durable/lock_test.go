package durable

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// WaitLock asks again while the lock is held elsewhere, returns once it is
// granted, and returns any other error at once.
func TestWaitLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	open := func() int {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	holder, waiter := open(), open()
	if err := unix.Flock(holder, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	tries := 0
	done := make(chan error, 1)
	go func() {
		done <- WaitLock(func() error { tries++; return unix.Flock(waiter, unix.LOCK_SH|unix.LOCK_NB) }, nil)
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("granted beside an exclusive lock: %v", err)
	default:
	}
	if err := unix.Flock(holder, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after the holder shared its lock: %v", err)
	}
	if tries < 2 {
		t.Errorf("asked %d times, want again while held", tries)
	}
	if err := WaitLock(func() error { return unix.EBADF }, nil); !errors.Is(err, unix.EBADF) {
		t.Errorf("another error: %v, want it returned", err)
	}
	for _, err := range []error{unix.EAGAIN, unix.EWOULDBLOCK, unix.EACCES} {
		if !LockHeld(err) {
			t.Errorf("LockHeld(%v) = false", err)
		}
	}
}
