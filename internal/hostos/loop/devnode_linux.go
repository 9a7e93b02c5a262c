package loop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// sysDevBlock maps "major:minor" to a block device's sysfs directory. It
// lets Detach and SetCapacity tell which loop device a node refers to, so
// they never send loop ioctls (whose numbers other drivers reuse) to a
// device that is not a loop device.
const sysDevBlock = "/sys/dev/block"

// ensureNode makes sure path is a block device node, creating it when it is
// missing. Without udev (containers, minimal hosts) nobody creates
// /dev/loopN for devices that LOOP_CTL_GET_FREE adds beyond the first few.
// The device numbers come from sysDir/dev rather than 7:N because the minor
// is N << part_shift when the loop module has max_part set.
func ensureNode(path, sysDir string) error {
	var st unix.Stat_t
	err := unix.Stat(path, &st)
	if err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFBLK {
			return fmt.Errorf("loop: %s exists but is not a block device", path)
		}
		return nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	major, minor, err := readDevNum(sysDir)
	if err != nil {
		return err
	}
	err = unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(major, minor)))
	if errors.Is(err, unix.EEXIST) {
		return nil // created concurrently, by devtmpfs or another attach
	}
	if err != nil {
		return &os.PathError{Op: "mknod", Path: path, Err: err}
	}
	// mknod applies the umask; the node must be 0660 like udev makes it.
	if err := unix.Chmod(path, 0o660); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// identify returns N of the loop device open at fd, or an error wrapping
// ErrNotFound when fd is not a loop device (a partition, another block
// device, a regular file).
func identify(fd int, path string) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, fmt.Errorf("%s: %w: not a block device", path, ErrNotFound)
	}
	n, err := numberOf(unix.Major(st.Rdev), unix.Minor(st.Rdev))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// numberOf returns N of the loop device numbered major:minor, or an error
// wrapping ErrNotFound when that is no loop device.
func numberOf(major, minor uint32) (int, error) {
	num := strconv.FormatUint(uint64(major), 10) + ":" + strconv.FormatUint(uint64(minor), 10)
	link, err := os.Readlink(filepath.Join(sysDevBlock, num))
	if err != nil {
		return 0, fmt.Errorf("%w: block device %s unknown to sysfs: %w", ErrNotFound, num, err)
	}
	n, ok := parseName(filepath.Base(link))
	if !ok {
		return 0, fmt.Errorf("%w: %s is not a loop device", ErrNotFound, filepath.Base(link))
	}
	return n, nil
}

func nameOf(major, minor uint32) (string, bool) {
	n, err := numberOf(major, minor)
	if err != nil {
		return "", false
	}
	return "loop" + strconv.Itoa(n), true
}
