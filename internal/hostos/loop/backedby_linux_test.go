package loop_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestBackedByIsIdentityNotPath: a device is backed by the file at a path
// only when the device and inode agree. Over the pool directory another
// filesystem is mounted (as a shared pool's client remounted over a dead
// one, or another node's client mount): sysfs still shows the same path
// string for the device, but the file there now is another one. An
// unlinked backing file is told by its filesystem.
func TestBackedByIsIdentityNotPath(t *testing.T) {
	dir := setup(t)
	pool := filepath.Join(dir, "pool")
	if err := os.Mkdir(pool, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", pool, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(pool, unix.MNT_DETACH) })
	img := newImage(t, pool, "v.img", 1<<20)
	d := mustAttach(t, img, loop.Options{})
	if !loop.BackedBy(d, img) {
		t.Fatalf("BackedBy(%s, %s) = false for the file it was attached to", d.Path, img)
	}
	other := newImage(t, dir, "other.img", 1<<20)
	if loop.BackedBy(d, other) {
		t.Fatalf("BackedBy(%s, %s) = true for another file", d.Path, other)
	}

	// Another filesystem over the pool, with a file at the same path.
	if err := unix.Mount("tmpfs", pool, "tmpfs", 0, "size=16m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(pool, unix.MNT_DETACH) })
	newImage(t, pool, "v.img", 1<<20)
	devs, err := loop.Find(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range devs {
		if x.Path == d.Path && loop.BackedBy(x, img) {
			t.Fatalf("BackedBy(%s, %s) = true after another filesystem was mounted over the pool: the path string matched, the file is another", d.Path, img)
		}
	}
	all, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range all {
		if x.Path == d.Path {
			if x.BackingFile != img {
				t.Logf("sysfs shows %s for the covered file", x.BackingFile)
			}
			if loop.BackedBy(x, img) {
				t.Fatalf("BackedBy(%s, %s) = true for the covered file", x.Path, img)
			}
		}
	}
	if err := unix.Unmount(pool, 0); err != nil {
		t.Fatal(err)
	}

	// The backing file unlinked: its filesystem decides.
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	all, _ = loop.List()
	for _, x := range all {
		if x.Path == d.Path {
			if !x.Deleted || !loop.BackedBy(x, img) {
				t.Fatalf("unlinked backing file: Deleted %v, BackedBy %v; want both true", x.Deleted, loop.BackedBy(x, img))
			}
			if loop.BackedBy(x, filepath.Join(dir, "v.img")) {
				t.Fatal("unlinked backing file: BackedBy true for a path on another filesystem")
			}
		}
	}
	// mustAttach's cleanup detaches by backing file path, which names no
	// device once the file is unlinked: this device is detached here, by
	// its node, while it is still the test's own.
	if err := loop.Detach(d.Path); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerIsKeptByTheDevice: Options.Owner is written into the device and
// read back by anyone on the host; a device attached without one has none.
func TestOwnerIsKeptByTheDevice(t *testing.T) {
	dir := setup(t)
	tagged := mustAttach(t, newImage(t, dir, "tagged.img", 1<<20), loop.Options{Owner: "filevol/0123456789abcdef"})
	plain := mustAttach(t, newImage(t, dir, "plain.img", 1<<20), loop.Options{})
	if got := loop.Owner(tagged); got != "filevol/0123456789abcdef" {
		t.Errorf("Owner of a device attached with one = %q", got)
	}
	if got := loop.Owner(plain); got != "" {
		t.Errorf("Owner of a device attached without one = %q", got)
	}
}
