package ofd

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// open opens the file at path (made if need be) as a raw descriptor, a
// description of its own.
func open(t *testing.T, path string, flag int) int {
	t.Helper()
	fd, err := unix.Open(path, flag|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// Two opens of one file in one process conflict (what makes OFD locks
// testable without a second process), and the refusal is ErrHeld, the
// kernel's EAGAIN, and reads as the request and that answer.
func TestTryLockFDRefusalIsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a, b := open(t, path, unix.O_RDWR), open(t, path, unix.O_RDWR)
	if err := TryLockFD(a, Write, Whole); err != nil {
		t.Fatal(err)
	}
	err := TryLockFD(b, Read, Whole)
	var held *HeldError
	if !errors.Is(err, ErrHeld) || !errors.Is(err, unix.EAGAIN) || !errors.As(err, &held) {
		t.Fatalf("got %v, want a *HeldError matching ErrHeld and EAGAIN", err)
	}
	if got, want := err.Error(), "F_OFD_SETLK: resource temporarily unavailable"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if err := UnlockFD(a, Whole); err != nil {
		t.Fatal(err)
	}
	if err := TryLockFD(b, Read, Whole); err != nil {
		t.Fatalf("after the unlock: %v", err)
	}
}

// ConflictFD reports the holder's lock as the kernel keeps it, through a
// descriptor open for reading only, and takes nothing.
func TestConflictFD(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	holder, probe := open(t, path, unix.O_RDWR), open(t, path, unix.O_RDONLY)
	if _, ok, err := ConflictFD(probe, Write, Whole); ok || err != nil {
		t.Fatalf("nothing held: %v, %v", ok, err)
	}
	if err := TryLockFD(holder, Write, Range{Start: 8, Len: 4}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ConflictFD(probe, Read, Whole)
	if want := (Lock{Type: Write, Range: Range{Start: 8, Len: 4}}); !ok || err != nil || got != want {
		t.Fatalf("got %v %v %v, want %v", got, ok, err, want)
	}
	if _, ok, _ := ConflictFD(probe, Write, Range{Start: 12}); ok {
		t.Fatal("a range past the holder's reported a conflict")
	}
	if err := TryLockFD(holder, Write, Whole); err != nil {
		t.Fatalf("the probe took a lock: %v", err)
	}
}

// LockFD waits in the kernel for the holder to let go.
func TestLockFDWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a, b := open(t, path, unix.O_RDWR), open(t, path, unix.O_RDWR)
	if err := TryLockFD(a, Write, Whole); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- LockFD(b, Write, Range{Start: 0, Len: 1}) }()
	select {
	case err := <-got:
		t.Fatalf("LockFD did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := UnlockFD(a, Whole); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LockFD still waits after the unlock")
	}
}

func TestStrings(t *testing.T) {
	for got, want := range map[string]string{
		Read.String():                           "read",
		Write.String():                          "write",
		Whole.String():                          "[0,end)",
		Range{Start: 3, Len: 2}.String():        "[3,5)",
		Type(99).String():                       "type(99)",
		(&HeldError{"op", unix.EACCES}).Error(): "op: permission denied",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
