package loop

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the raw system calls; callers add context to the errors.

// loopControl is the misc device that hands out free loop devices.
const loopControl = "/dev/loop-control"

// openFD opens path close-on-exec (a forked program must not inherit a hold
// on the device) and retries EINTR, which opening a block device can return.
// The error is a *os.PathError naming path.
func openFD(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// getFree returns N of an unattached /dev/loopN, creating the device in the
// kernel when none is free. Another process may attach it before we do.
func getFree(ctl int) (int, error) { return unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE) }

// clearFD detaches the backing file. On current kernels this does not fail
// with EBUSY: with other openers the kernel sets LO_FLAGS_AUTOCLEAR and
// detaches at the last close instead (see detach).
func clearFD(fd int) error { return unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0) }

// setCapacityFD makes the kernel re-read the backing file's size. On an fd
// opened read-only the kernel requires CAP_SYS_ADMIN, which the node plugin
// has anyway (it mounts).
func setCapacityFD(fd int) error { return unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0) }

// sizeBytes returns the block device size (BLKGETSIZE64); x/sys/unix has no
// wrapper for a uint64 result.
func sizeBytes(fd int) (int64, error) {
	var size uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
	if errno != 0 {
		return 0, errno
	}
	return int64(size), nil
}
