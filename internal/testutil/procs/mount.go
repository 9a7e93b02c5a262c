package procs

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// ErrExited is WaitMounted's error when the client exits before its mount
// answers.
var ErrExited = errors.New("client exited")

// Mounted reports whether a filesystem of type fsType (as the mount table
// names it: "fuse.glusterfs", "fuse.ceph-fuse") is mounted at dir.
func Mounted(dir, fsType string) bool {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	return err == nil && slices.ContainsFunc(ms, func(m *mountinfo.Info) bool { return m.FSType == fsType })
}

// Unmount unmounts, lazily, every mount of type fsType at dir: a dead
// FUSE client's, before a new client mounts there again.
func Unmount(dir, fsType string) error {
	for Mounted(dir, fsType) {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return err
		}
	}
	return nil
}

// WaitMounted waits until a filesystem of type fsType is mounted at dir
// and answers statfs: a FUSE client's mount is in the table before its
// client serves it. It returns ErrExited when exited (the client's end) is
// closed first, and an error "not mounted after ..." after timeout.
func WaitMounted(dir, fsType string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if Mounted(dir, fsType) {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return ErrExited
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not mounted after %v", timeout)
		}
	}
}
