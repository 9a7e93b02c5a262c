package fs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/testutil"
)

var tools = Tools{R: Exec{}}

// scratch is a fresh directory under /tmp/filevol-test/fs, cleaned of
// whatever a killed earlier run left there.
func scratch(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t)
	return testutil.Scratch(t, "fs")
}

// needTool skips the test when program is not installed.
func needTool(t testing.TB, program string) {
	t.Helper()
	if _, err := lookPath(program, searchPath()); err != nil {
		t.Skipf("%s is not installed (apt-get install e2fsprogs xfsprogs btrfs-progs): %v", program, err)
	}
}

// needFS skips the test unless fstype's mkfs and grow tools are installed.
func needFS(t testing.TB, fstype string) {
	t.Helper()
	needTool(t, mkfsArgs[fstype][0])
	needTool(t, map[string]string{"ext4": "resize2fs", "xfs": "xfs_growfs", "btrfs": "btrfs"}[fstype])
}

// attachImage attaches a new sparse image of size bytes in dir, with
// direct I/O as the driver does.
func attachImage(t testing.TB, dir string, size int64) (loop.Device, string) {
	t.Helper()
	img, err := os.CreateTemp(dir, "img-")
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if err := img.Truncate(size); err != nil {
		t.Fatal(err)
	}
	dev, err := loop.Attach(context.Background(), img.Name(), loop.Options{DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	return dev, img.Name()
}

// newDevice is attachImage with a detach at cleanup.
func newDevice(t testing.TB, dir string, size int64) (loop.Device, string) {
	t.Helper()
	dev, img := attachImage(t, dir, size)
	t.Cleanup(func() {
		if err := loop.Detach(dev.Path); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return dev, img
}

// mountDev mounts dev at dir/name and unmounts it at cleanup (after a thaw,
// in case the test left it frozen).
func mountDev(t testing.TB, dev, dir, fstype string) string {
	t.Helper()
	target := filepath.Join(dir, "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mount.Mount(dev, target, fstype, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := thaw(target); err != nil && !errors.Is(err, ErrNotMountPoint) {
			t.Errorf("cleanup: %v", err)
		}
		if err := mount.UnmountAll(target); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return target
}
