package loop

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// detach clears devPath. Current kernels' LOOP_CLR_FD does not fail with
// EBUSY on a device in use (only very old ones did): it sets
// LO_FLAGS_AUTOCLEAR, returns 0, and the kernel detaches at the last close.
// Issued blindly on a mounted device it would tear the device down at
// unmount, behind the caller's back. So:
//
//   - the device is opened O_EXCL first; a mounted filesystem holds an
//     exclusive claim, so that open fails with EBUSY → ErrBusy and nothing
//     is changed;
//   - after LOOP_CLR_FD and our close, a device that stays attached to the
//     same file with autoclear set is held open by someone else (a process
//     using the raw device): ErrBusy, and the kernel finishes the detach
//     when they close it.
//
// With keep set (detachFile), the device is cleared only while its backing
// file is one keep accepts. The check is race-free because our O_EXCL open
// blocks re-attachment: LOOP_CONFIGURE must claim the device too.
func detach(devPath string) error { return detachNode(devPath, nil, true) }

// detachFile detaches every device backed by backingFile, checking each one
// under its O_EXCL hold so that a number freed and reused meanwhile is left
// alone.
func detachFile(backingFile string) error {
	keep := matcher(backingFile)
	devs, err := scan(sysBlock, keep)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range devs {
		if err := detachNode(d.Path, keep, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func detachNode(devPath string, keep func(Device) bool, mayCreate bool) error {
	fd, err := openExclusive(devPath)
	switch {
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("loop: detach %s: %w: mounted or claimed exclusively%s", devPath, ErrBusy, holders(devPath))
	case errors.Is(err, unix.ENXIO):
		return nil // being removed by LOOP_CTL_REMOVE: nothing attached
	case errors.Is(err, fs.ErrNotExist) && mayCreate:
		return detachMissingNode(devPath, keep, err)
	case err != nil:
		return fmt.Errorf("loop: detach: %w", err)
	}
	n, err := identify(fd, devPath)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("loop: detach: %w", err)
	}
	before, wasAttached, err := readDevice(sysBlock, n, nil)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("loop: detach %s: %w", devPath, err)
	}
	if keep != nil && (!wasAttached || !keep(before)) {
		unix.Close(fd)
		return nil // detached already, or now someone else's device
	}
	err = clearFD(fd)
	unix.Close(fd) // as the last opener, this close performs the teardown
	switch {
	case errors.Is(err, unix.ENXIO):
		return nil // not attached: detach is idempotent
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("loop: detach %s: %w", devPath, ErrBusy) // very old kernels
	case err != nil:
		return fmt.Errorf("loop: detach %s (%s): LOOP_CLR_FD: %w", devPath, before.BackingFile, err)
	}
	if !wasAttached {
		return nil
	}
	// If someone else still has the device open, the kernel finishes the
	// detach at their last close. Short-lived openers (udev's blkid probe)
	// get a moment before that is reported as ErrBusy.
	for i := 0; ; i++ {
		pending, err := detachPending(n, before.BackingFile)
		if err != nil {
			return fmt.Errorf("loop: detach %s: %w", devPath, err)
		}
		if !pending {
			return nil
		}
		if i == pendingPolls {
			return fmt.Errorf("loop: detach %s (%s): %w: held open (%s); the kernel detaches it at the last close",
				devPath, before.BackingFile, ErrBusy, Holders(devPath))
		}
		time.Sleep(pendingPoll)
	}
}

// Short-lived openers of a loop device — another program's blkid or
// btrfs device scan, kubelet's own probes — hold it for milliseconds to a
// few hundred; a second of patience turns nearly all of them into a clean
// detach instead of an error the CO must retry.
const (
	pendingPolls = 100
	pendingPoll  = 10 * time.Millisecond
	exclTries    = 50
	exclWait     = 10 * time.Millisecond
)

// detachPending reports whether loopN is still attached to backing with
// autoclear set, i.e. our LOOP_CLR_FD was deferred. A device attached again
// meanwhile (GET_FREE handed it to someone) has autoclear off or another
// file: that is not ours to report.
func detachPending(n int, backing string) (bool, error) {
	d, attached, err := readDevice(sysBlock, n, nil)
	if err != nil || !attached || d.BackingFile != backing {
		return false, err
	}
	auto, err := readBool(filepath.Join(sysBlock, "loop"+strconv.Itoa(n)), "loop/autoclear")
	if gone(err) {
		return false, nil
	}
	return auto, err
}

// detachMissingNode handles a /dev/loopN node that does not exist: nothing
// to do when sysfs says the device is not attached; otherwise create the
// node (udev is not running) and detach through it.
func detachMissingNode(devPath string, keep func(Device) bool, openErr error) error {
	n, ok := parseName(filepath.Base(devPath))
	if !ok || filepath.Dir(devPath) != devDir {
		return fmt.Errorf("loop: detach: %w: %w", ErrNotFound, openErr)
	}
	_, attached, err := readDevice(sysBlock, n, nil)
	if err != nil {
		return fmt.Errorf("loop: detach %s: %w", devPath, err)
	}
	if !attached {
		return nil
	}
	if err := ensureNode(devPath, filepath.Join(sysBlock, "loop"+strconv.Itoa(n))); err != nil {
		return fmt.Errorf("loop: detach %s: %w", devPath, err)
	}
	return detachNode(devPath, keep, false)
}

// openExclusive opens the device O_EXCL, retrying for a moment while a
// transient exclusive opener (a program probing devices) holds it. A
// mounted device stays busy and still ends in EBUSY, only later.
func openExclusive(devPath string) (int, error) {
	for i := 0; ; i++ {
		fd, err := openFD(devPath, unix.O_RDONLY|unix.O_EXCL)
		if !errors.Is(err, unix.EBUSY) || i == exclTries {
			return fd, err
		}
		time.Sleep(exclWait)
	}
}
