package loop_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// attachThroughGoneMount attaches file the way a replaced driver pod did:
// through a bind mount of its directory's parent (the pod's view of the
// pool) that is then detached, so the kernel can no longer resolve the
// backing path from our root and reports it relative to that mount. It
// returns the device and the path sysfs now shows.
func attachThroughGoneMount(t *testing.T, dir, pool, file string) (loop.Device, string) {
	t.Helper()
	view := filepath.Join(dir, "pod-view")
	if err := os.MkdirAll(view, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(pool, view, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", pool, err)
	}
	rel, err := filepath.Rel(pool, file)
	if err != nil {
		t.Fatal(err)
	}
	d, err := loop.Attach(t.Context(), filepath.Join(view, rel), loop.Options{})
	if err != nil {
		_ = unix.Unmount(view, unix.MNT_DETACH)
		t.Fatal(err)
	}
	// The real path finds it from here on, which is what this test proves;
	// a failing test must not leak the device either.
	t.Cleanup(func() {
		if err := loop.Detach(d.Path); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := unix.Unmount(view, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.Path), "loop/backing_file"))
	if err != nil {
		t.Fatal(err)
	}
	shown, _ := loop.ParseBackingFile(string(raw))
	if shown != "/"+rel {
		t.Skipf("kernel reports %q for a file attached through a detached mount, not the mount-relative %q", shown, "/"+rel)
	}
	return d, shown
}

// TestFindAcrossMountNamespaces: a device attached through a mount that is
// gone is still found, resolved and detached by the file's real path —
// before this, NodeUnstage after a driver pod restart left it attached.
func TestFindAcrossMountNamespaces(t *testing.T) {
	dir, pool := setupPool(t)
	img := newImage(t, filepath.Join(pool, "volumes"), "a.img", 64<<20)
	other := newImage(t, filepath.Join(pool, "volumes"), "b.img", 64<<20)
	d, shown := attachThroughGoneMount(t, dir, pool, img)

	found, err := loop.Find(img)
	if err != nil || len(found) != 1 || found[0].Path != d.Path {
		t.Fatalf("Find(%s) = %+v, %v; want %s (sysfs shows %q)", img, found, err, d.Path, shown)
	}
	// Same relative name, another file: identity, not the name, decides.
	if found, err := loop.Find(filepath.Join(dir, "elsewhere", "volumes", "a.img")); err != nil || len(found) != 0 {
		t.Errorf("Find of another file with the same relative name = %+v, %v; want nothing", found, err)
	}
	if found, err := loop.Find(other); err != nil || len(found) != 0 {
		t.Errorf("Find(%s) = %+v, %v; want nothing", other, found, err)
	}

	all, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	resolved := byPath(loop.ResolveUnder(all, pool), d.Path)
	if resolved == nil || resolved.BackingFile != img {
		t.Errorf("ResolveUnder: %+v, want backing file %s", resolved, img)
	}
	if unresolved := byPath(loop.ResolveUnder(all, filepath.Join(dir, "elsewhere")), d.Path); unresolved == nil || unresolved.BackingFile != shown {
		t.Errorf("ResolveUnder another dir: %+v, want it left as %q", unresolved, shown)
	}

	if err := loop.DetachFile(img); err != nil {
		t.Fatalf("DetachFile(%s): %v", img, err)
	}
	if found, err := loop.Find(img); err != nil || len(found) != 0 {
		t.Fatalf("after DetachFile: %+v, %v", found, err)
	}
}

// TestFindDeletedAcrossMountNamespaces: the image was deleted while such a
// device held it (DeleteVolume after an unstage that missed the device), so
// only the filesystem and the relative name are left to recognise it by.
func TestFindDeletedAcrossMountNamespaces(t *testing.T) {
	dir, pool := setupPool(t)
	img := newImage(t, filepath.Join(pool, "volumes"), "gone.img", 64<<20)
	d, _ := attachThroughGoneMount(t, dir, pool, img)
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	all, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	resolved := byPath(loop.ResolveUnder(all, pool), d.Path)
	if resolved == nil || resolved.BackingFile != img || !resolved.Deleted {
		t.Fatalf("ResolveUnder: %+v, want %s, deleted", resolved, img)
	}
	if err := loop.DetachFile(img); err != nil {
		t.Fatalf("DetachFile(%s): %v", img, err)
	}
	if found, err := loop.Find(img); err != nil || len(found) != 0 {
		t.Fatalf("after DetachFile: %+v, %v", found, err)
	}
}

// setupPool returns a scratch directory and a pool in it with a volumes/
// directory, laid out as filevol's.
func setupPool(t *testing.T) (dir, pool string) {
	t.Helper()
	dir = setup(t)
	pool = filepath.Join(dir, "pool")
	if err := os.MkdirAll(filepath.Join(pool, "volumes"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, pool
}

func byPath(devs []loop.Device, path string) *loop.Device {
	for i := range devs {
		if devs[i].Path == path {
			return &devs[i]
		}
	}
	return nil
}
