// Package testutil helps tests that use real loop devices and mounts keep
// the machine clean: every scratch file lives under /tmp/filevol-test/<name>,
// and whatever a killed earlier run left there (mounts, loop devices, files)
// is removed before the next run starts and after every test.
//
// It is imported only by tests. It must not import gRPC, CSI or pool; it
// uses hostos/loop to find and detach loop devices.
package testutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// Base is the directory under which all scratch directories live.
const Base = "/tmp/filevol-test"

// RequireRoot skips the test unless it runs as root: loop devices and
// mounts need CAP_SYS_ADMIN.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: uses real loop devices and mounts")
	}
}

// prepared remembers, per scratch name, that this process has cleaned the
// directory and holds its lock. The lock file stays referenced here so its
// finalizer never closes it (which would drop the lock).
var prepared = struct {
	sync.Mutex
	dirs map[string]*os.File
}{dirs: map[string]*os.File{}}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Scratch returns a new empty directory for this test under
// /tmp/filevol-test/<name>/ and registers a t.Cleanup that unmounts,
// detaches and removes everything in it.
//
// The first call per process for a name takes an exclusive lock on
// /tmp/filevol-test/.<name>.lock (held until the process exits; the kernel
// drops it even when the process is killed) and then runs
// CleanLeftovers on /tmp/filevol-test/<name>. Because of the lock, a second
// test process using the same name (CI on the same machine) waits instead of
// cleaning up devices that are still in use, and what CleanLeftovers finds
// can only belong to a process that is gone.
//
// Each test gets its own subdirectory so parallel tests and their cleanups
// do not interfere.
func Scratch(t testing.TB, name string) string {
	t.Helper()
	if !validName.MatchString(name) {
		t.Fatalf("testutil.Scratch: invalid name %q", name)
	}
	root := filepath.Join(Base, name)
	if err := prepare(t, name, root); err != nil {
		t.Fatalf("testutil.Scratch: %v", err)
	}
	dir, err := os.MkdirTemp(root, testDirPrefix(t.Name()))
	if err != nil {
		t.Fatalf("testutil.Scratch: %v", err)
	}
	t.Cleanup(func() {
		if err := CleanLeftovers(dir); err != nil {
			t.Errorf("testutil.Scratch cleanup: %v", err)
		}
	})
	return dir
}

func prepare(t testing.TB, name, root string) error {
	prepared.Lock()
	defer prepared.Unlock()
	if _, ok := prepared.dirs[name]; ok {
		return nil
	}
	if err := os.MkdirAll(Base, 0o755); err != nil {
		return err
	}
	lockPath := filepath.Join(Base, "."+name+".lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		t.Logf("waiting for %s: another test process uses %s", lockPath, root)
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		lock.Close()
		return fmt.Errorf("lock %s: %w", lockPath, err)
	}
	if err := CleanLeftovers(root); err != nil {
		lock.Close()
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		lock.Close()
		return err
	}
	prepared.dirs[name] = lock
	return nil
}

// testDirPrefix turns a test name (which may hold slashes and spaces) into
// a short directory name prefix.
func testDirPrefix(name string) string {
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	return name + "-"
}

// CleanLeftovers unmounts everything mounted at or under root (deepest
// first, falling back to a lazy MNT_DETACH), detaches every loop device
// whose backing file is under root, and removes root. root must be an
// absolute path other than "/". A missing root is not an error.
//
// The order matters both ways: a filesystem on a loop device must be
// unmounted before the device can be detached, but a loop device whose
// backing file lives on a mount under root (a tmpfs, say) keeps that mount
// busy — and unmounting it lazily first would make the backing path
// unreachable, so the device could no longer be recognised as ours. Hence:
// plain unmounts, detach, then lazy unmounts for what is left, detach again.
func CleanLeftovers(root string) error {
	root = filepath.Clean(root)
	if !filepath.IsAbs(root) || root == "/" {
		return fmt.Errorf("testutil: refusing to clean %q", root)
	}
	roots := []string{root}
	// The kernel reports resolved paths (mountinfo, backing_file).
	if real, err := filepath.EvalSymlinks(root); err == nil && real != root {
		roots = append(roots, real)
	}
	under := func(p string) bool {
		return slices.ContainsFunc(roots, func(r string) bool { return p == r || strings.HasPrefix(p, r+"/") })
	}
	_ = unmountUnder(under, false) // what stays mounted is retried below
	_ = detachUnder(under, false)
	var errs []error
	if err := unmountUnder(under, true); err != nil {
		errs = append(errs, err)
	}
	if err := detachUnder(under, true); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(root); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount whose mount point satisfies under,
// lazily (MNT_DETACH) when a plain unmount fails and lazy is set. Mounts can
// be stacked on one mount point, so it rereads the table until nothing
// matches or a pass makes no progress.
func unmountUnder(under func(string) bool, lazy bool) error {
	var lastErr error
	for range 64 {
		mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
			return !under(m.Mountpoint), false
		})
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		// Deepest first; on one mount point the newest (top) mount first.
		slices.SortFunc(mounts, func(a, b *mountinfo.Info) int {
			if d := strings.Count(b.Mountpoint, "/") - strings.Count(a.Mountpoint, "/"); d != 0 {
				return d
			}
			return b.ID - a.ID
		})
		progress := false
		for _, m := range mounts {
			// A run killed between FIFREEZE and FITHAW leaves its filesystem
			// frozen; unmounting a frozen filesystem keeps it frozen in the
			// kernel and its loop device busy. Thawing an unfrozen one is
			// a harmless EINVAL.
			thaw(m.Mountpoint)
			err := unix.Unmount(m.Mountpoint, 0)
			if lazy && err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				err = unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
			}
			if err == nil {
				progress = true
			} else if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				lastErr = fmt.Errorf("unmount %s: %w", m.Mountpoint, err)
			}
		}
		if !progress {
			break
		}
	}
	if lastErr == nil {
		lastErr = errors.New("unmount made no progress")
	}
	return fmt.Errorf("testutil: mounts remain: %w", lastErr)
}

// detachUnder detaches the loop devices whose backing file satisfies under,
// through loop.DetachFile so that a device number reused meanwhile is left
// alone. With wait, ErrBusy is retried for a second: a filesystem just
// unmounted lazily keeps its device claimed until its last reference goes.
//
// It detaches first the devices backed by files that live on those
// devices' filesystems (a pool filesystem's volumes), found by the
// backing file's device number: once such a pool filesystem has been
// unmounted lazily, its volumes' backing paths no longer resolve under
// root ("/volumes/..."), yet they keep the pool filesystem, and so its
// loop device, busy for as long as they stay attached.
func detachUnder(under func(string) bool, wait bool) error {
	devs, err := loop.List()
	if err != nil {
		return err
	}
	var files []string
	ours := map[uint64]bool{} // device numbers of the devices to detach
	for _, d := range devs {
		if under(d.BackingFile) {
			ours[unix.Mkdev(d.Major, d.Minor)] = true
			if !slices.Contains(files, d.BackingFile) {
				files = append(files, d.BackingFile)
			}
		}
	}
	var errs []error
	for _, d := range backedByOurs(devs, ours) {
		if err := detachIfBackedBy(d, ours); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range files {
		err := loop.DetachFile(f)
		for i := 0; wait && errors.Is(err, loop.ErrBusy) && i < 20; i++ {
			time.Sleep(50 * time.Millisecond)
			err = loop.DetachFile(f)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// backedByOurs returns the devices whose backing file lives on one of the
// ours devices, transitively (adding each to ours), the most dependent
// first: the order to detach them in.
func backedByOurs(devs []loop.Device, ours map[uint64]bool) []loop.Device {
	var out []loop.Device
	for found := true; found; {
		found = false
		for _, d := range devs {
			self := unix.Mkdev(d.Major, d.Minor)
			if ours[self] {
				continue
			}
			if backing, ok := backingDev(d.Path); ok && ours[backing] {
				ours[self], found = true, true
				out = append(out, d)
			}
		}
	}
	slices.Reverse(out)
	return out
}

// detachIfBackedBy detaches d if its backing file still lives on one of
// the ours devices (the number may have been freed and reused meanwhile).
func detachIfBackedBy(d loop.Device, ours map[uint64]bool) error {
	if backing, ok := backingDev(d.Path); !ok || !ours[backing] {
		return nil
	}
	if err := loop.Detach(d.Path); err != nil && !errors.Is(err, loop.ErrNotFound) {
		return fmt.Errorf("detach %s, backed by a file on a device being cleaned up: %w", d.Path, err)
	}
	return nil
}

// backingDev is the device number of the filesystem holding the backing
// file of the loop device at path (LOOP_GET_STATUS64's lo_device).
func backingDev(path string) (uint64, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	if err != nil {
		return 0, false
	}
	return info.Device, true
}

// fiThaw is FITHAW, _IOWR('X', 120, int) from linux/fs.h (x/sys/unix lacks
// it; hostos/fs cannot be imported here: its tests use this package).
const fiThaw = 0xC0045878

// thaw issues FITHAW on the filesystem mounted at dir, ignoring errors.
func thaw(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_, _ = unix.IoctlGetInt(fd, fiThaw)
}
