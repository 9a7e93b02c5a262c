// Package dirpooltest makes btrfs filesystems on loop devices for the
// tests of directory pools. Tests only; it imports testutil and hostos,
// never dirpool.
package dirpooltest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/testutil"
)

// Btrfs makes a btrfs filesystem of size bytes on a loop device of its
// own, backed by a sparse file under dir, mounts it at dir/btrfs and
// returns that path: a directory pool's filesystem. dir is a Scratch
// directory, whose cleanup unmounts and detaches it. Root only; skips
// when mkfs.btrfs is missing (hack/install-deps.sh installs it).
func Btrfs(t testing.TB, dir string, size int64) string {
	t.Helper()
	return Filesystem(t, dir, size, "btrfs")
}

// Filesystem is Btrfs for any filesystem mkfs.<fstype> makes (ext4, xfs:
// a directory pool without a quota filevol can enforce), mounted at
// dir/<fstype>.
func Filesystem(t testing.TB, dir string, size int64, fstype string) string {
	t.Helper()
	testutil.RequireRoot(t)
	mkfs := "mkfs." + fstype
	if _, err := exec.LookPath(mkfs); err != nil {
		t.Skip(mkfs + " is not installed (hack/install-deps.sh)")
	}
	img := filepath.Join(dir, fstype+".img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	dev, err := loop.Attach(context.Background(), img, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	force := "-f"
	if fstype == "ext4" {
		force = "-F"
	}
	if out, err := exec.Command(mkfs, "-q", force, dev.Path).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", mkfs, err, out)
	}
	mnt := filepath.Join(dir, fstype)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mount.Mount(dev.Path, mnt, fstype, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mount.UnmountAll(mnt); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
		// btrfs lets go of its device shortly after the unmount returns:
		// retry a while, then leave the device to the Scratch cleanup
		// (testutil.CleanLeftovers detaches what is backed under dir).
		for i := 0; ; i++ {
			err := loop.Detach(dev.Path)
			if err == nil || i == 50 {
				if err != nil {
					t.Logf("detach %s: %v (left to the scratch cleanup)", dev.Path, err)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return mnt
}
