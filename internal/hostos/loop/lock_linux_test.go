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
