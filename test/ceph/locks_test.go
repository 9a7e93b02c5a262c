package ceph_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// What the attachment locks need from CephFS: an OFD write lock on a byte
// taken through one client refuses the same byte through another, leaves
// the bytes around it free (also near the top of the range), F_OFD_GETLK
// through the other client reports it, and a request waiting for the byte
// is granted when the holder closes its file.
func TestByteRangeLocksAcrossClients(t *testing.T) {
	_, a, b := twoNodes(t)
	lock := func(fd uintptr, cmd int, typ int16, off int64) (unix.Flock_t, error) {
		lk := unix.Flock_t{Type: typ, Start: off, Len: 1}
		err := unix.FcntlFlock(fd, cmd, &lk)
		return lk, err
	}
	for _, off := range []int64{0, 4242, 1<<62 - 1} {
		holder, other := open(t, filepath.Join(a, "locks")), open(t, filepath.Join(b, "locks"))
		if _, err := lock(holder.Fd(), unix.F_OFD_SETLK, unix.F_WRLCK, off); err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if _, err := lock(other.Fd(), unix.F_OFD_SETLK, unix.F_WRLCK, off); !errors.Is(err, unix.EAGAIN) {
			t.Errorf("offset %d held through node-a, locked through node-b: %v, want EAGAIN", off, err)
		}
		got, err := lock(other.Fd(), unix.F_OFD_GETLK, unix.F_WRLCK, off)
		t.Logf("offset %d: F_OFD_GETLK through node-b: type %d start %d len %d pid %d (%v)", off, got.Type, got.Start, got.Len, got.Pid, err)
		if err != nil || got.Type != unix.F_WRLCK || got.Start != off || got.Len != 1 {
			t.Errorf("offset %d: F_OFD_GETLK through node-b does not name node-a's lock: %+v, %v", off, got, err)
		}
		for _, next := range []int64{off + 1, max(off-1, 1<<20)} {
			if _, err := lock(other.Fd(), unix.F_OFD_SETLK, unix.F_WRLCK, next); err != nil {
				t.Errorf("offset %d beside the held %d: %v", next, off, err)
			}
		}
		granted := make(chan time.Time, 1)
		go func() {
			if _, err := lock(other.Fd(), unix.F_OFD_SETLKW, unix.F_WRLCK, off); err != nil {
				t.Errorf("offset %d: the waiting request: %v", off, err)
			}
			granted <- time.Now()
		}()
		select {
		case <-granted:
			t.Fatalf("offset %d: a waiting request granted beside the holder", off)
		case <-time.After(300 * time.Millisecond):
		}
		closed := time.Now()
		holder.Close()
		select {
		case at := <-granted:
			t.Logf("offset %d: the waiter was granted %v after the holder closed", off, at.Sub(closed).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Fatalf("offset %d: the waiting request still waits 10 s after the holder closed", off)
		}
		other.Close()
	}
}

// A waiter for a write lock is not woken when the holder downgrades its
// write lock to a read lock (it would then be refused anyway: a read lock
// still conflicts with a write), only when the holder unlocks: filevol
// must not count on a downgrade to hand a lock over.
func TestDowngradeDoesNotWakeWaiter(t *testing.T) {
	_, a, b := twoNodes(t)
	holder, waiter := open(t, filepath.Join(a, "lock")), open(t, filepath.Join(b, "lock"))
	reader := open(t, filepath.Join(b, "lock"))
	if err := ofd(holder, unix.F_WRLCK); err != nil {
		t.Fatal(err)
	}
	granted := make(chan time.Time, 1)
	go func() {
		lk := unix.Flock_t{Type: unix.F_WRLCK}
		if err := unix.FcntlFlock(waiter.Fd(), unix.F_OFD_SETLKW, &lk); err != nil {
			t.Errorf("the waiter: %v", err)
		}
		granted <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond)
	if err := ofd(holder, unix.F_RDLCK); err != nil {
		t.Fatalf("downgrade: %v", err)
	}
	// The downgrade took: another client's read lock is granted now.
	if err := ofd(reader, unix.F_RDLCK); err != nil {
		t.Errorf("a read lock through node-b after the downgrade: %v", err)
	}
	if err := ofd(reader, unix.F_UNLCK); err != nil {
		t.Fatal(err)
	}
	const watch = 3 * time.Second
	select {
	case <-granted:
		t.Fatal("the waiter for a write lock was granted while node-a holds a read lock")
	case <-time.After(watch):
		t.Logf("the waiter was not woken in the %v after the downgrade", watch)
	}
	unlocked := time.Now()
	if err := ofd(holder, unix.F_UNLCK); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-granted:
		t.Logf("the waiter was granted %v after the unlock", at.Sub(unlocked).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter still waits 10 s after the unlock")
	}
}
