package attach

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// leftovers lists what is in the attachments' directory dir besides the
// permanent lock file.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != LocksName {
			out = append(out, e.Name())
		}
	}
	return out
}

// ofdLock tries (without waiting) an OFD write lock on [start, start+n)
// of f, as another process would.
func ofdLock(f *os.File, start, n int64) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: start, Len: n}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// holdEarlierVersionsLock makes a store and holds the lock of the volume's
// own lock file, as a replica of the earlier version does.
func holdEarlierVersionsLock(t *testing.T) (*Store, *os.File) {
	t.Helper()
	s := New(t.TempDir())
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old, err := os.OpenFile(s.legacyLockPath(vol), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := ofdLock(old, 0, 0); err != nil {
		old.Close()
		t.Fatal(err)
	}
	return s, old
}

// One volume's lock is its byte of the permanent file: held, the byte is
// locked and another volume's byte is free; the file stays after the
// volume is forgotten, and no per-volume lock file is ever made.
func TestVolumeLockIsItsByteOfOnePermanentFile(t *testing.T) {
	s := New(t.TempDir())
	const other = "fv1-img-3f9a0c2e-ffffffffffffffffffffffffffffffff"
	if lockOffset(vol) == lockOffset(other) {
		t.Fatalf("the test's two volumes share offset %d", lockOffset(vol))
	}
	err := s.withLock(vol, func() error {
		f, err := os.OpenFile(filepath.Join(s.dir, LocksName), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := ofdLock(f, lockOffset(vol), 1); !errors.Is(err, unix.EAGAIN) {
			t.Errorf("the volume's byte while its lock is held: %v, want EAGAIN", err)
		}
		if err := ofdLock(f, lockOffset(other), 1); err != nil {
			t.Errorf("another volume's byte while this one's is held: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(vol); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(s.dir)
	if len(entries) != 1 || entries[0].Name() != LocksName {
		t.Fatalf("after attach and forget the directory holds %v, want only %s", entries, LocksName)
	}
}

// A replica of the earlier version (a lock file per volume) during a
// rolling upgrade: while it holds <volume>.lock, this version's change
// of the record waits; once it lets go, the change goes on, and the
// volume's delete removes the old file.
func TestEarlierVersionsLockFileIsHonoured(t *testing.T) {
	s, old := holdEarlierVersionsLock(t)
	defer old.Close()
	done := make(chan error, 1)
	go func() {
		_, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("an attach went on while the earlier version held the volume's lock file: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	unlock := unix.Flock_t{Type: unix.F_UNLCK}
	if err := unix.FcntlFlock(old.Fd(), unix.F_OFD_SETLK, &unlock); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("attach once the earlier version let go: %v", err)
	}
	if err := s.Retire(vol, func(Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s.dir); len(left) != 0 {
		t.Fatalf("the delete left %v", left)
	}
}

// An earlier version's delete unlinks its lock file while this version
// waits on it: the wait ends with the file no longer the volume's lock,
// and the change goes on without it.
func TestEarlierVersionsUnlinkedLockFileIsLeft(t *testing.T) {
	s, old := holdEarlierVersionsLock(t)
	done := make(chan error, 1)
	go func() { done <- s.withLock(vol, func() error { return nil }) }()
	time.Sleep(200 * time.Millisecond)
	if err := os.Remove(s.legacyLockPath(vol)); err != nil {
		t.Fatal(err)
	}
	old.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s.dir); !slices.Equal(left, []string(nil)) {
		t.Fatalf("left %v", left)
	}
}
