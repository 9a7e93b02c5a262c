package loop_test

import (
	"errors"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestLockFencesASecondDevice: a device attached with Lock holds its
// backing file's lock for as long as it exists; a second locking attach,
// as another node's would be on a shared pool, is refused with ErrLocked
// and leaves no device behind; Locked sees the holder; once the first
// device is detached the file is free again. Read locks share.
func TestLockFencesASecondDevice(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "fenced.img", 8<<20)
	if l, err := loop.Locked(img); err != nil || l {
		t.Fatalf("Locked before any device = %v, %v; want false", l, err)
	}
	first := mustAttach(t, img, loop.Options{Lock: true, DirectIO: true})
	if l, err := loop.Locked(img); err != nil || !l {
		t.Fatalf("Locked with a locking device = %v, %v; want true", l, err)
	}
	before, err := loop.Find(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loop.Attach(t.Context(), img, loop.Options{Lock: true}); !errors.Is(err, loop.ErrLocked) {
		t.Fatalf("second locking attach = %v, want ErrLocked", err)
	}
	if _, err := loop.Attach(t.Context(), img, loop.Options{Lock: true, ReadOnly: true}); !errors.Is(err, loop.ErrLocked) {
		t.Fatalf("read-only locking attach beside a writer = %v, want ErrLocked", err)
	}
	after, err := loop.Find(img)
	if err != nil || len(after) != len(before) {
		t.Fatalf("refused attaches left devices: %d before, %d after (%v)", len(before), len(after), err)
	}
	if err := loop.Detach(first.Path); err != nil {
		t.Fatal(err)
	}
	if l, err := loop.Locked(img); err != nil || l {
		t.Fatalf("Locked after the detach = %v, %v; want false", l, err)
	}
	r1 := mustAttach(t, img, loop.Options{Lock: true, ReadOnly: true})
	r2 := mustAttach(t, img, loop.Options{Lock: true, ReadOnly: true})
	if r1.Path == r2.Path {
		t.Fatalf("two read-only devices share %s", r1.Path)
	}
	if _, err := loop.Attach(t.Context(), img, loop.Options{Lock: true}); !errors.Is(err, loop.ErrLocked) {
		t.Fatalf("writer's locking attach beside readers = %v, want ErrLocked", err)
	}
}

// TestMarkIsSeenByLocked: a device attached with Mark holds a read lock on
// its backing file while it exists, which Locked sees (one probe instead
// of reading every device's sysfs); marks share, so a writer and a
// read-only device can both be marked, and the mark goes with the last
// device. A device attached without Mark or Lock holds none.
func TestMarkIsSeenByLocked(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "marked.img", 8<<20)
	plain := mustAttach(t, img, loop.Options{DirectIO: true})
	if l, err := loop.Locked(img); err != nil || l {
		t.Fatalf("Locked with an unmarked device = %v, %v; want false", l, err)
	}
	if err := loop.Detach(plain.Path); err != nil {
		t.Fatal(err)
	}
	rw := mustAttach(t, img, loop.Options{Mark: true, DirectIO: true})
	if l, err := loop.Locked(img); err != nil || !l {
		t.Fatalf("Locked with a marked device = %v, %v; want true", l, err)
	}
	ro := mustAttach(t, img, loop.Options{Mark: true, ReadOnly: true})
	if err := loop.Detach(rw.Path); err != nil {
		t.Fatal(err)
	}
	if l, err := loop.Locked(img); err != nil || !l {
		t.Fatalf("Locked with the read-only marked device left = %v, %v; want true", l, err)
	}
	if err := loop.Detach(ro.Path); err != nil {
		t.Fatal(err)
	}
	if l, err := loop.Locked(img); err != nil || l {
		t.Fatalf("Locked after both detaches = %v, %v; want false", l, err)
	}
}
