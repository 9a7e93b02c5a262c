package loop_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

func TestDetachIdempotent(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 1<<20)
	d, err := loop.Attach(t.Context(), img, loop.Options{DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Detach(d.Path); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if got := mustFind(t, img); len(got) != 0 {
		t.Fatalf("after Detach Find = %+v", got)
	}
	// d.Path may already serve another process's Attach: the repeat goes
	// through DetachFile, and plain Detach is repeated on a private device.
	if err := loop.DetachFile(img); err != nil {
		t.Errorf("DetachFile(nothing attached): %v", err)
	}
	free := privateDevice(t)
	for i := range 2 {
		if err := loop.Detach(free); err != nil {
			t.Errorf("Detach(unattached) #%d: %v", i+1, err)
		}
	}
	if _, err := loop.SetCapacity(free); !errors.Is(err, loop.ErrNotFound) {
		t.Errorf("SetCapacity(unattached) = %v, want ErrNotFound", err)
	}
	// A node that does not exist for a device sysfs does not know either.
	if err := loop.Detach("/dev/loop999999"); err != nil {
		t.Errorf("Detach(missing node): %v", err)
	}
	if _, err := loop.SetCapacity("/dev/loop999999"); !errors.Is(err, loop.ErrNotFound) {
		t.Errorf("SetCapacity(missing node) = %v, want ErrNotFound", err)
	}
}

func TestDetachFile(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 1<<20)
	other := newImage(t, dir, "other.img", 1<<20)
	mustAttach(t, img, loop.Options{})
	mustAttach(t, img, loop.Options{ReadOnly: true})
	o := mustAttach(t, other, loop.Options{})
	if err := loop.DetachFile(dir + "/./v.img"); err != nil {
		t.Fatal(err)
	}
	if got := mustFind(t, img); len(got) != 0 {
		t.Errorf("after DetachFile Find = %+v", got)
	}
	if got := mustFind(t, other); len(got) != 1 || got[0] != o {
		t.Errorf("DetachFile touched another file's device: Find(other) = %+v", got)
	}
}

func TestDetachNotLoop(t *testing.T) {
	dir := setup(t)
	for _, p := range []string{"/dev/null", "/dev/loop-control", newImage(t, dir, "plain", 4096), filepath.Join(dir, "missing")} {
		if err := loop.Detach(p); !errors.Is(err, loop.ErrNotFound) {
			t.Errorf("Detach(%s) = %v, want ErrNotFound", p, err)
		}
		if _, err := loop.SetCapacity(p); !errors.Is(err, loop.ErrNotFound) {
			t.Errorf("SetCapacity(%s) = %v, want ErrNotFound", p, err)
		}
	}
}

// TestDetachMounted: a mounted device must be refused with ErrBusy and left
// exactly as it was — in particular not marked autoclear, which is what a
// bare LOOP_CLR_FD does on current kernels.
func TestDetachMounted(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "fs.img", 32<<20)
	if out, err := exec.Command("mkfs.ext4", "-F", "-q", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	d := mustAttach(t, img, loop.Options{DirectIO: true})
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(d.Path, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", d.Path, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, 0) })

	err := loop.Detach(d.Path)
	if !errors.Is(err, loop.ErrBusy) || !strings.Contains(err.Error(), d.Path) {
		t.Fatalf("Detach(mounted) = %v, want ErrBusy naming %s", err, d.Path)
	}
	if got := mustFind(t, img); len(got) != 1 || got[0] != d {
		t.Errorf("after refused Detach Find = %+v, want [%+v]", got, d)
	}
	autoclear, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.Path), "loop/autoclear"))
	if err != nil || strings.TrimSpace(string(autoclear)) != "0" {
		t.Errorf("autoclear = %q (%v), want 0", autoclear, err)
	}

	if err := loop.DetachFile(img); !errors.Is(err, loop.ErrBusy) {
		t.Errorf("DetachFile(mounted) = %v, want ErrBusy", err)
	}

	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	if err := loop.Detach(d.Path); err != nil {
		t.Fatalf("Detach after unmount: %v", err)
	}
	if got := mustFind(t, img); len(got) != 0 {
		t.Errorf("after Detach Find = %+v", got)
	}
}

// TestDetachHeldOpen: a process holding the raw device open (not mounted)
// cannot stop the detach, only delay it; Detach says ErrBusy and the kernel
// detaches at the last close.
func TestDetachHeldOpen(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 1<<20)
	d := mustAttach(t, img, loop.Options{})
	holder, err := os.Open(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Detach(d.Path); !errors.Is(err, loop.ErrBusy) {
		t.Errorf("Detach(held open) = %v, want ErrBusy", err)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mustFind(t, img); len(got) != 0 {
		t.Errorf("after last close Find = %+v, want none", got)
	}
}

func TestSetCapacity(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 8<<20)
	d := mustAttach(t, img, loop.Options{DirectIO: true})
	if err := os.Truncate(img, 24<<20); err != nil {
		t.Fatal(err)
	}
	if got := mustFind(t, img); got[0].SizeBytes != 8<<20 {
		t.Errorf("before SetCapacity size = %d, want the old %d", got[0].SizeBytes, 8<<20)
	}
	size, err := loop.SetCapacity(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	if size != 24<<20 {
		t.Errorf("SetCapacity = %d, want %d", size, 24<<20)
	}
	if got := mustFind(t, img); got[0].SizeBytes != 24<<20 {
		t.Errorf("sysfs size = %d, want %d", got[0].SizeBytes, 24<<20)
	}
}

// TestEnsureNode creates a node the way Attach does when udev has not,
// here in the scratch directory instead of /dev.
func TestEnsureNode(t *testing.T) {
	dir := setup(t)
	node := filepath.Join(dir, "loop0")
	for range 2 { // the second call finds it in place
		if err := loop.EnsureNode(node, "/sys/block/loop0"); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != 7 || unix.Minor(st.Rdev) != 0 || st.Mode&0o777 != 0o660 {
		t.Errorf("node mode %o rdev %d:%d, want block 0660 7:0", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	plain := newImage(t, dir, "plain", 0)
	if err := loop.EnsureNode(plain, "/sys/block/loop0"); err == nil {
		t.Error("EnsureNode over a regular file: want an error")
	}
}
