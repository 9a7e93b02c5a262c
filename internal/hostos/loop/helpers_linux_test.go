package loop_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
)

// setup skips unless root and returns a fresh scratch directory.
func setup(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t)
	return testutil.Scratch(t, scratchName)
}

// newImage creates a sparse file of size bytes in dir.
func newImage(t testing.TB, dir, name string, size int64) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustAttach attaches file and detaches it when the test ends (Scratch's
// cleanup would too, but this keeps the device count low in long runs). The
// cleanup uses DetachFile, not Detach(d.Path): the test may have detached
// the device already and the number may now belong to another process.
func mustAttach(t testing.TB, file string, opts loop.Options) loop.Device {
	t.Helper()
	d, err := loop.Attach(t.Context(), file, opts)
	if err != nil {
		t.Fatalf("Attach(%s, %+v): %v", file, opts, err)
	}
	t.Cleanup(func() {
		if err := loop.DetachFile(d.BackingFile); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return d
}

// privateDevice creates an unattached loop device with a high number
// (LOOP_CTL_ADD) and removes it when the test ends. LOOP_CTL_GET_FREE hands
// out the lowest free number, so no concurrent Attach on the host takes this
// one: tests can detach it or resize it while unattached without touching
// anyone else's device.
func privateDevice(t testing.TB) string {
	t.Helper()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctlIoctl := func(req, n uintptr) error {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), req, n)
		if errno != 0 {
			return errno
		}
		return nil
	}
	for i := range 64 {
		n := 4096 + (os.Getpid()+i)%4096
		err := ctlIoctl(unix.LOOP_CTL_ADD, uintptr(n))
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			t.Fatalf("LOOP_CTL_ADD %d: %v", n, err)
		}
		t.Cleanup(func() {
			ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
			if err == nil {
				_, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), unix.LOOP_CTL_REMOVE, uintptr(n))
				ctl.Close()
				if errno != 0 {
					err = errno
				}
			}
			if err != nil {
				t.Errorf("LOOP_CTL_REMOVE %d: %v", n, err)
			}
		})
		name := fmt.Sprintf("loop%d", n)
		dev := filepath.Join("/dev", name)
		if err := loop.EnsureNode(dev, filepath.Join("/sys/block", name)); err != nil {
			t.Fatal(err)
		}
		return dev
	}
	t.Fatal("LOOP_CTL_ADD: no unused high device number")
	return ""
}

// mustFind returns Find(file) and fails the test on error.
func mustFind(t testing.TB, file string) []loop.Device {
	t.Helper()
	devs, err := loop.Find(file)
	if err != nil {
		t.Fatalf("Find(%s): %v", file, err)
	}
	return devs
}

// writeDevice writes data at offset 0 of dev and flushes it.
func writeDevice(dev string, data []byte) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(data, 0)
	serr := f.Sync()
	return errors.Join(werr, serr, f.Close())
}

// mountTmp mounts a filesystem of fstype (tmpfs, ramfs) at dir/name.
func mountTmp(t testing.TB, dir, name, fstype string) string {
	t.Helper()
	mnt := filepath.Join(dir, name)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(fstype, mnt, fstype, 0, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", fstype, mnt, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, 0) }) // Scratch retries with MNT_DETACH
	return mnt
}
