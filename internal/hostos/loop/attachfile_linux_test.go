package loop_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// ofdLock takes (or, with typ F_UNLCK, drops) an OFD lock on the whole of
// f without waiting.
func ofdLock(f *os.File, typ int16) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// TestAttachFileHoldsTheOFDLock: a device attached through AttachFile holds
// the caller's open file description, so an OFD lock taken through it stays
// held after the caller closes its fd, for as long as the device exists, and
// is released when the device is detached.
func TestAttachFileHoldsTheOFDLock(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "locked.img", 8<<20)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ofdLock(f, unix.F_WRLCK); err != nil {
		t.Fatalf("F_OFD_SETLK: %v", err)
	}
	d, err := loop.AttachFile(t.Context(), f, loop.Options{DirectIO: true})
	if err != nil {
		f.Close()
		t.Fatalf("AttachFile: %v", err)
	}
	t.Cleanup(func() { _ = loop.DetachFile(d.BackingFile) })
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if d.BackingFile != img || d.ReadOnly || d.SizeBytes != 8<<20 {
		t.Errorf("AttachFile = %+v, want backing %s, read-write, 8 MiB", d, img)
	}

	other, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := ofdLock(other, unix.F_WRLCK); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("lock through another open file while the device holds the locked one: err = %v, want EAGAIN", err)
	}
	// The device works on that file description.
	data := bytes.Repeat([]byte("locked!!"), 512)
	if err := writeDevice(d.Path, data); err != nil {
		t.Fatalf("write to %s: %v", d.Path, err)
	}
	got := make([]byte, len(data))
	if _, err := other.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("backing file after the device write: %q, %v", got[:16], err)
	}

	if err := loop.Detach(d.Path); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	// The kernel drops the device's reference to the file on detach; the
	// lock goes with the last reference.
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := ofdLock(other, unix.F_WRLCK)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("lock after Detach: %v, want it granted", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAttachFileRefusesAMismatchedMode(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "ro.img", 1<<20)
	for _, tc := range []struct {
		flag int
		opts loop.Options
	}{
		{os.O_RDONLY, loop.Options{}},
		{os.O_WRONLY, loop.Options{}},
		{os.O_WRONLY, loop.Options{ReadOnly: true}},
	} {
		f, err := os.OpenFile(img, tc.flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		d, err := loop.AttachFile(t.Context(), f, tc.opts)
		f.Close()
		if err == nil {
			_ = loop.Detach(d.Path)
			t.Errorf("AttachFile(flags %#o, %+v) attached %s, want an error", tc.flag, tc.opts, d.Path)
		} else if !strings.Contains(err.Error(), "not open for reading and writing") {
			t.Errorf("AttachFile(flags %#o, %+v): %v", tc.flag, tc.opts, err)
		}
	}
	// Read-only on a read-only fd works.
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := loop.AttachFile(t.Context(), f, loop.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("AttachFile read-only: %v", err)
	}
	defer loop.DetachFile(d.BackingFile)
	if !d.ReadOnly {
		t.Errorf("AttachFile read-only = %+v, want ReadOnly", d)
	}
}
