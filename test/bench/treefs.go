package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// The tree-delete phase's filesystems, looked at from outside the driver.

// btrfsSubvolumeSync waits until the kernel's cleaner has freed the
// destroyed subvolume id on the filesystem at dir.
func btrfsSubvolumeSync(ctx context.Context, dir, id string) error {
	ctx, cancel := context.WithTimeout(ctx, treeRemovalTimeout)
	defer cancel()
	_, err := btrfsCmd(ctx, "subvolume", "sync", dir, id)
	return err
}

// btrfsRootID is the ID of the subvolume that holds path.
func btrfsRootID(ctx context.Context, path string) (string, error) {
	return btrfsCmd(ctx, "inspect-internal", "rootid", path)
}

func btrfsCmd(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "btrfs", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("btrfs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// unmountAndDetach undoes makeLoopFS.
func unmountAndDetach(mnt, img string) error {
	if err := mount.UnmountAll(mnt); err != nil {
		return err
	}
	// btrfs lets go of its device a moment after the unmount returns.
	var err error
	for range 50 {
		if err = loop.DetachFile(img); err == nil {
			return os.Remove(img)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// runFS makes a fsType filesystem of size bytes named name under the run
// directory (makeLoopFS), mounted at runDir/name, and returns where, with
// what undoes it.
func (b *bench) runFS(ctx context.Context, name, fsType string, size int64) (string, func() error, error) {
	img := filepath.Join(b.runDir, name+".img")
	mnt := filepath.Join(b.runDir, name)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return "", nil, err
	}
	if err := makeLoopFS(ctx, img, mnt, fsType, size); err != nil {
		return "", nil, err
	}
	return mnt, func() error { return unmountAndDetach(mnt, img) }, nil
}
