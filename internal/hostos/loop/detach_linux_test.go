package loop_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestDetachBusyNamesTheHolder: a device still mounted in another mount
// namespace after our own unmount (a copy of the host's mount table that a
// new container or test server has not dropped yet) is ErrBusy, and the
// error says so and names the process, where a bare "busy" would send the
// reader looking for a missed unmount of the caller's own.
//
// btrfs too: its mount table entries carry an anonymous device number, not
// the loop device's; only their source names the device.
func TestDetachBusyNamesTheHolder(t *testing.T) {
	for _, fs := range []string{"ext4", "btrfs"} {
		t.Run(fs, func(t *testing.T) { testDetachBusyNamesTheHolder(t, fs) })
	}
}

func testDetachBusyNamesTheHolder(t *testing.T, fs string) {
	dir := setup(t)
	img := newImage(t, dir, "fs.img", 128<<20)
	if out, err := exec.Command("mkfs."+fs, "-q", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.%s: %v: %s", fs, err, out)
	}
	d := mustAttach(t, img, loop.Options{})
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(d.Path, mnt, fs, 0, ""); err != nil {
		t.Fatalf("mount %s: %v", d.Path, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, 0) })

	err := loop.Detach(d.Path)
	if !errors.Is(err, loop.ErrBusy) || !strings.Contains(err.Error(), "mounted in this mount namespace at "+mnt) {
		t.Fatalf("Detach(mounted here) = %v, want ErrBusy saying it is mounted here at %s", err, mnt)
	}

	release := holdInAnotherNamespace(t, mnt)
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	err = loop.Detach(d.Path)
	var st unix.Stat_t
	if err := unix.Stat(d.Path, &st); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s only, device %d:%d: pid %d (", loop.ForeignMount, unix.Major(st.Rdev), unix.Minor(st.Rdev), os.Getpid())
	if !errors.Is(err, loop.ErrBusy) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ") at "+mnt) {
		t.Fatalf("Detach(mounted only in another namespace) = %v, want ErrBusy containing %q and %s", err, want, mnt)
	}
	release()
	// The namespace goes with its thread; the device frees a moment later.
	deadline := time.Now().Add(10 * time.Second)
	for err = loop.Detach(d.Path); err != nil && time.Now().Before(deadline); err = loop.Detach(d.Path) {
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Detach after the other namespace ended: %v", err)
	}
}

// holdInAnotherNamespace gives one OS thread a mount namespace of its own
// (a copy of ours, as every new namespace starts) that keeps only keep and
// what it needs: every other copied mount is detached at once, so that
// other programs' devices are not held. release ends the thread, and with
// it the namespace.
func holdInAnotherNamespace(t *testing.T, keep string) (release func()) {
	t.Helper()
	ready, done, back := make(chan error), make(chan struct{}), make(chan error)
	go func() {
		// Never unlocked: the thread is not given back to other goroutines
		// even after it returned to our namespace.
		runtime.LockOSThread()
		ours, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			ready <- err
			return
		}
		defer ours.Close()
		ready <- privateCopyKeeping(keep)
		<-done
		// Back to our namespace, which ends the copy (its last user).
		// Not left to the thread's exit: a goroutine locked to the main
		// thread does not end it.
		back <- unix.Setns(int(ours.Fd()), unix.CLONE_NEWNS)
	}()
	if err := <-ready; err != nil {
		close(done)
		t.Fatalf("new mount namespace: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(done)
			if err := <-back; err != nil {
				t.Errorf("leave the mount namespace: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

func privateCopyKeeping(keep string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return err
	}
	// Private first: an unmount in a copy still in its peer groups would
	// propagate back to the host's mounts.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points))) // children before parents
	for _, p := range points {
		if p == "/" || p == keep || strings.HasPrefix(keep, p+"/") {
			continue
		}
		_ = unix.Unmount(p, unix.MNT_DETACH) // gone with its parent already, or escaped: harmless
	}
	return nil
}
