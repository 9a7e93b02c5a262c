package loop

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// detach clears devPath. Since Linux 5.x LOOP_CLR_FD no longer fails with
// EBUSY on a device in use: it sets LO_FLAGS_AUTOCLEAR and returns 0, and the
// kernel detaches at the last close. Issued blindly on a mounted device it
// would tear the device down at unmount behind the caller's back. So:
//
//   - the device is opened O_EXCL first; a mounted filesystem holds an
//     exclusive claim, so that open fails with EBUSY → ErrBusy and nothing
//     is changed;
//   - after LOOP_CLR_FD and our close, a device that is still attached to
//     the same file with autoclear set is held open by someone else (a
//     process using the raw device): ErrBusy, and the kernel finishes the
//     detach when they close it.
func detach(devPath string) error { return detachNode(devPath, true) }

func detachNode(devPath string, mayCreate bool) error {
	fd, err := openFD(devPath, unix.O_RDONLY|unix.O_EXCL)
	switch {
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("loop: detach %s: %w: mounted or claimed exclusively", devPath, ErrBusy)
	case errors.Is(err, unix.ENXIO):
		return nil // being removed by LOOP_CTL_REMOVE: nothing attached
	case errors.Is(err, fs.ErrNotExist) && mayCreate:
		return detachMissingNode(devPath, err)
	case err != nil:
		return fmt.Errorf("loop: detach: %w", err)
	}
	n, err := identify(fd, devPath)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("loop: detach: %w", err)
	}
	before, wasAttached, err := readDevice(sysBlock, n)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("loop: detach %s: %w", devPath, err)
	}
	err = clearFD(fd)
	unix.Close(fd) // as the last opener, this close performs the teardown
	switch {
	case errors.Is(err, unix.ENXIO):
		return nil // not attached: detach is idempotent
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("loop: detach %s: %w", devPath, ErrBusy) // kernels before 5.x
	case err != nil:
		return fmt.Errorf("loop: detach %s (%s): LOOP_CLR_FD: %w", devPath, before.BackingFile, err)
	}
	if !wasAttached {
		return nil
	}
	after, attached, err := readDevice(sysBlock, n)
	if err != nil {
		return fmt.Errorf("loop: detach %s: %w", devPath, err)
	}
	// A device attached again meanwhile (GET_FREE handed it to someone)
	// has autoclear off or another file: that is not ours to report.
	if attached && after.BackingFile == before.BackingFile {
		base := filepath.Join(sysBlock, "loop"+strconv.Itoa(n))
		if auto, err := readBool(base, "loop/autoclear"); err == nil && auto {
			return fmt.Errorf("loop: detach %s (%s): %w: held open; the kernel detaches it at the last close",
				devPath, before.BackingFile, ErrBusy)
		}
	}
	return nil
}

// detachMissingNode handles a /dev/loopN node that does not exist: nothing
// to do when sysfs says the device is not attached; otherwise create the
// node (udev is not running) and detach through it.
func detachMissingNode(devPath string, openErr error) error {
	n, ok := parseName(filepath.Base(devPath))
	if !ok || filepath.Dir(devPath) != devDir {
		return fmt.Errorf("loop: detach: %w: %w", ErrNotFound, openErr)
	}
	_, attached, err := readDevice(sysBlock, n)
	if err != nil {
		return fmt.Errorf("loop: detach %s: %w", devPath, err)
	}
	if !attached {
		return nil
	}
	if err := ensureNode(devPath, filepath.Join(sysBlock, "loop"+strconv.Itoa(n))); err != nil {
		return fmt.Errorf("loop: detach %s: %w", devPath, err)
	}
	return detachNode(devPath, false)
}
