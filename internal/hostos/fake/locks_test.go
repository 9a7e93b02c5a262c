package fake

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/ofd"
)

// lockers are the kernel's Locker and the fake: every contract test runs
// on both, so the fake is held to what the kernel does on the test's own
// filesystem.
func lockers() map[string]func() ofd.Locker {
	return map[string]func() ofd.Locker{
		"kernel": func() ofd.Locker { return ofd.Kernel{} },
		"fake":   func() ofd.Locker { return NewLocks() },
	}
}

// opens opens the file at path n times, each a description of its own.
func opens(t *testing.T, path string, flag, n int) []*os.File {
	t.Helper()
	var fs []*os.File
	for range n {
		f, err := os.OpenFile(path, flag|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs = append(fs, f)
	}
	return fs
}

func forEachLocker(t *testing.T, test func(t *testing.T, l ofd.Locker, path string)) {
	for name, mk := range lockers() {
		t.Run(name, func(t *testing.T) { test(t, mk(), filepath.Join(t.TempDir(), "f")) })
	}
}

func mustLock(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustBeHeld(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ofd.ErrHeld) || !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("got %v, want ErrHeld (EAGAIN)", err)
	}
}

// Two opens of one file in one process are two descriptions: their locks
// conflict, write against anything, read against write, and a
// description's own lock never conflicts with itself.
func TestLocksConflictAcrossDescriptions(t *testing.T) {
	forEachLocker(t, func(t *testing.T, l ofd.Locker, path string) {
		f := opens(t, path, os.O_RDWR, 2)
		mustLock(t, l.TryLock(f[0], ofd.Write, ofd.Whole))
		mustLock(t, l.TryLock(f[0], ofd.Write, ofd.Whole))
		mustBeHeld(t, l.TryLock(f[1], ofd.Write, ofd.Whole))
		mustBeHeld(t, l.TryLock(f[1], ofd.Read, ofd.Range{Start: 7, Len: 1}))
		// Turned into a read lock in place: readers share it, a writer
		// still waits.
		mustLock(t, l.TryLock(f[0], ofd.Read, ofd.Whole))
		mustLock(t, l.TryLock(f[1], ofd.Read, ofd.Whole))
		mustBeHeld(t, l.TryLock(f[0], ofd.Write, ofd.Whole))
	})
}

// Unlock and close each release a description's locks.
func TestLocksReleasedByUnlockAndClose(t *testing.T) {
	forEachLocker(t, func(t *testing.T, l ofd.Locker, path string) {
		f := opens(t, path, os.O_RDWR, 3)
		mustLock(t, l.TryLock(f[0], ofd.Write, ofd.Whole))
		mustLock(t, l.Unlock(f[0], ofd.Whole))
		mustLock(t, l.Unlock(f[0], ofd.Whole)) // nothing held: no error
		mustLock(t, l.TryLock(f[1], ofd.Write, ofd.Whole))
		mustBeHeld(t, l.TryLock(f[2], ofd.Write, ofd.Whole))
		f[1].Close()
		mustLock(t, l.TryLock(f[2], ofd.Write, ofd.Whole))
		if err := l.TryLock(f[1], ofd.Write, ofd.Whole); err == nil {
			t.Fatal("a closed file took a lock")
		}
	})
}

// Byte ranges: disjoint ones do not conflict, overlapping ones do, and
// unlocking the middle of a lock leaves its two ends held.
func TestLocksRanges(t *testing.T) {
	forEachLocker(t, func(t *testing.T, l ofd.Locker, path string) {
		f := opens(t, path, os.O_RDWR, 2)
		mustLock(t, l.TryLock(f[0], ofd.Write, ofd.Range{Start: 5, Len: 1}))
		mustLock(t, l.TryLock(f[1], ofd.Write, ofd.Range{Start: 6, Len: 1}))
		mustLock(t, l.TryLock(f[1], ofd.Write, ofd.Range{Start: 0, Len: 5}))
		mustBeHeld(t, l.TryLock(f[1], ofd.Write, ofd.Range{Start: 4, Len: 2}))
		mustBeHeld(t, l.TryLock(f[1], ofd.Read, ofd.Range{Start: 5}))
		mustLock(t, l.Unlock(f[1], ofd.Whole))

		mustLock(t, l.TryLock(f[0], ofd.Write, ofd.Whole))
		mustLock(t, l.Unlock(f[0], ofd.Range{Start: 10, Len: 10}))
		mustLock(t, l.TryLock(f[1], ofd.Write, ofd.Range{Start: 10, Len: 10}))
		mustBeHeld(t, l.TryLock(f[1], ofd.Write, ofd.Range{Start: 9, Len: 1}))
		mustBeHeld(t, l.TryLock(f[1], ofd.Write, ofd.Range{Start: 20, Len: 1}))
	})
}

// Conflict reports another description's lock, merged as the kernel keeps
// it, takes nothing, never reports the caller's own, and works through a
// file open for reading only.
func TestLocksConflictReportsTheHolder(t *testing.T) {
	forEachLocker(t, func(t *testing.T, l ofd.Locker, path string) {
		f := opens(t, path, os.O_RDWR, 1)[0]
		probe := opens(t, path, os.O_RDONLY, 2)
		if _, ok, err := l.Conflict(probe[0], ofd.Write, ofd.Whole); ok || err != nil {
			t.Fatalf("nothing held: got %v, %v", ok, err)
		}
		mustLock(t, l.TryLock(f, ofd.Read, ofd.Range{Start: 0, Len: 10}))
		mustLock(t, l.TryLock(f, ofd.Read, ofd.Range{Start: 10, Len: 10}))
		got, ok, err := l.Conflict(probe[0], ofd.Write, ofd.Range{Start: 15, Len: 1})
		want := ofd.Lock{Type: ofd.Read, Range: ofd.Range{Start: 0, Len: 20}}
		if !ok || err != nil || got != want {
			t.Fatalf("got %v %v %v, want %v", got, ok, err, want)
		}
		if _, ok, err := l.Conflict(probe[0], ofd.Read, ofd.Whole); ok || err != nil {
			t.Fatalf("a reader conflicts with a reader: %v, %v", ok, err)
		}
		if _, ok, err := l.Conflict(f, ofd.Write, ofd.Whole); ok || err != nil {
			t.Fatalf("the holder's own lock reported: %v, %v", ok, err)
		}
		// Two probes at once each see the holder (neither took a lock),
		// and after its close, neither does.
		for _, p := range probe {
			if _, ok, _ := l.Conflict(p, ofd.Write, ofd.Whole); !ok {
				t.Fatal("a probe missed the holder")
			}
		}
		f.Close()
		for _, p := range probe {
			if held, ok, _ := l.Conflict(p, ofd.Write, ofd.Whole); ok {
				t.Fatalf("a closed holder still reported: %v", held)
			}
		}
	})
}

// A lock is set only through a file open for the access it stands for.
func TestLocksNeedTheAccessTheyStandFor(t *testing.T) {
	forEachLocker(t, func(t *testing.T, l ofd.Locker, path string) {
		r := opens(t, path, os.O_RDONLY, 1)[0]
		w := opens(t, path, os.O_WRONLY, 1)[0]
		if err := l.TryLock(r, ofd.Write, ofd.Whole); !errors.Is(err, unix.EBADF) {
			t.Fatalf("write lock through a read-only file: %v, want EBADF", err)
		}
		if err := l.TryLock(w, ofd.Read, ofd.Whole); !errors.Is(err, unix.EBADF) {
			t.Fatalf("read lock through a write-only file: %v, want EBADF", err)
		}
		mustLock(t, l.TryLock(r, ofd.Read, ofd.Whole))
		mustBeHeld(t, l.TryLock(w, ofd.Write, ofd.Whole))
	})
}

// Files are told apart by identity: a lock follows its file through a
// rename, and a new file made under the old name is free.
func TestLocksFollowTheFileNotTheName(t *testing.T) {
	forEachLocker(t, func(t *testing.T, l ofd.Locker, path string) {
		f := opens(t, path, os.O_RDWR, 1)[0]
		mustLock(t, l.TryLock(f, ofd.Write, ofd.Whole))
		moved := path + ".moved"
		mustLock(t, os.Rename(path, moved))
		mustBeHeld(t, l.TryLock(opens(t, moved, os.O_RDWR, 1)[0], ofd.Write, ofd.Whole))
		mustLock(t, l.TryLock(opens(t, path, os.O_RDWR, 1)[0], ofd.Write, ofd.Whole))
	})
}

// Lock waits while another description holds a conflicting lock and gets
// it when that one is closed.
func TestLockWaitsForTheHolder(t *testing.T) {
	forEachLocker(t, func(t *testing.T, l ofd.Locker, path string) {
		f := opens(t, path, os.O_RDWR, 2)
		mustLock(t, l.TryLock(f[0], ofd.Write, ofd.Range{Start: 3, Len: 1}))
		got := make(chan error, 1)
		go func() { got <- l.Lock(f[1], ofd.Read, ofd.Range{Start: 3, Len: 1}) }()
		select {
		case err := <-got:
			t.Fatalf("Lock did not wait for the holder: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		f[0].Close()
		select {
		case err := <-got:
			mustLock(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Lock still waits after the holder's close")
		}
	})
}

// A holder elsewhere fences this process's descriptions until it lets go.
func TestFakeHoldElsewhere(t *testing.T) {
	l := NewLocks()
	path := filepath.Join(t.TempDir(), "f")
	f := opens(t, path, os.O_RDWR, 1)[0]
	release, err := l.HoldElsewhere(path, ofd.Write, ofd.Range{Start: 1, Len: 1})
	mustLock(t, err)
	mustBeHeld(t, l.TryLock(f, ofd.Read, ofd.Whole))
	if _, err := l.HoldElsewhere(path, ofd.Read, ofd.Whole); !errors.Is(err, ofd.ErrHeld) {
		t.Fatalf("a second holder elsewhere got a conflicting lock: %v", err)
	}
	if held, _ := l.Held(path); len(held) != 1 || held[0] != (ofd.Lock{Type: ofd.Write, Range: ofd.Range{Start: 1, Len: 1}}) {
		t.Fatalf("Held: %v", held)
	}
	release()
	mustLock(t, l.TryLock(f, ofd.Write, ofd.Whole))
}

// Injected errors fail a call before it changes anything, and the log
// says what was asked.
func TestFakeLocksFailAndLog(t *testing.T) {
	l := NewLocks()
	path := filepath.Join(t.TempDir(), "f")
	f := opens(t, path, os.O_RDWR, 2)
	l.FailOnce("TryLock", unix.ENOLCK)
	if err := l.TryLock(f[0], ofd.Write, ofd.Whole); !errors.Is(err, unix.ENOLCK) {
		t.Fatalf("got %v, want ENOLCK", err)
	}
	mustLock(t, l.TryLock(f[1], ofd.Write, ofd.Whole)) // the failed call took nothing
	l.Fail("Conflict", unix.EIO)
	if _, _, err := l.Conflict(f[0], ofd.Write, ofd.Whole); !errors.Is(err, unix.EIO) {
		t.Fatalf("got %v, want EIO", err)
	}
	l.Fail("Conflict", nil)
	want := []string{
		"TryLock write [0,end) " + path + ": no locks available",
		"TryLock write [0,end) " + path,
		"Conflict write [0,end) " + path + ": input/output error",
	}
	if got := l.Log(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("log:\n%q\nwant\n%q", got, want)
	}
}
