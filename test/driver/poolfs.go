package driver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
)

// poolMkfs makes the pool filesystems the tests use: xfs with reflink
// (snapshots by FICLONE), btrfs (reflink too) and ext4 (snapshots by
// copy).
var poolMkfs = map[string][]string{
	"xfs":   {"mkfs.xfs", "-f", "-q", "-m", "reflink=1"},
	"btrfs": {"mkfs.btrfs", "-f", "-q"},
	"ext4":  {"mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"},
}

// StartOnFilesystem makes a pool filesystem of fsType (xfs, btrfs or
// ext4; size bytes, sparse) on a loop file in a fresh scratch directory
// called scratch, mounts it where Start opens its pool, and starts the
// driver. Everything is under the scratch directory, which testutil
// cleans (unmount, detach, remove). Root only; skips when the mkfs is
// missing.
func StartOnFilesystem(t testing.TB, scratch, fsType string, size int64) *Driver {
	t.Helper()
	testutil.RequireRoot(t) // before Scratch, which needs root too
	dir := testutil.Scratch(t, scratch)
	PoolFilesystem(t, dir, fsType, size)
	d := Start(t, dir)
	// The pool holds its directories open: closed, the pool filesystem
	// can be unmounted and its loop device detached by the cleanup.
	t.Cleanup(func() { d.Stop(t); _ = d.Pool.Close() })
	return d
}

// PoolFilesystem makes a pool filesystem of fsType (xfs, btrfs or ext4;
// size bytes, sparse) on the loop file dir/poolfs.img and mounts it at
// dir/pool, which it returns: for tests that run the driver some other
// way than Start (test/faults runs it as a process of its own). dir must
// be a testutil scratch directory, whose cleanup unmounts and detaches
// both. Root only; skips when the mkfs is missing.
func PoolFilesystem(t testing.TB, dir, fsType string, size int64) string {
	t.Helper()
	testutil.RequireRoot(t)
	argv, ok := poolMkfs[fsType]
	if !ok {
		t.Fatalf("no pool filesystem %q", fsType)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("%s is not installed", argv[0])
	}
	img := filepath.Join(dir, "poolfs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	dev, err := loop.Attach(context.Background(), img, loop.Options{DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(argv[0], append(argv[1:], dev.Path)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", argv[0], err, out)
	}
	mnt := filepath.Join(dir, "pool")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := ""
	if fsType == "ext4" {
		opts = "noinit_itable" // no background zeroing while benchmarks time
	}
	if err := unix.Mount(dev.Path, mnt, fsType, 0, opts); err != nil {
		t.Fatalf("mount pool filesystem: %v", err)
	}
	return mnt
}
