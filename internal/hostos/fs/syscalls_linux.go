package fs

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FIFREEZE and FITHAW are _IOWR('X', 119, int) and _IOWR('X', 120, int)
// from linux/fs.h; x/sys/unix does not define them. The encoding is the
// same on every architecture Go supports.
const (
	fiFreeze = 0xC0045877
	fiThaw   = 0xC0045878
)

func statFS(path string) (Stats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Stats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	// Block counts are in fragment-size units (statvfs(3)); Linux sets
	// f_frsize on every filesystem since 2.6, f_bsize is the fallback.
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	used := uint64(0)
	if st.Blocks > st.Bfree {
		used = st.Blocks - st.Bfree
	}
	usedInodes := uint64(0)
	if st.Files > st.Ffree {
		usedInodes = st.Files - st.Ffree
	}
	return Stats{
		TotalBytes:     mul(uint64(st.Blocks), unit),
		AvailableBytes: mul(uint64(st.Bavail), unit),
		UsedBytes:      mul(used, unit),
		TotalInodes:    clamp(uint64(st.Files)),
		FreeInodes:     clamp(uint64(st.Ffree)),
		UsedInodes:     clamp(usedInodes),
	}, nil
}

// mul multiplies without wrapping past int64: a bogus statfs answer must
// not turn into a negative size.
func mul(n, unit uint64) int64 {
	if unit != 0 && n > math.MaxInt64/unit {
		return math.MaxInt64
	}
	return int64(n * unit)
}

func clamp(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

func blockDeviceSize(dev string) (int64, error) {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("device size: %w", err)
	}
	defer f.Close()
	// unix has no IoctlGetUint64; BLKGETSIZE64 writes a u64 through the
	// pointer on every architecture.
	var size uint64
	conn, err := f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("device size of %s: %w", dev, err)
	}
	var errno unix.Errno
	if err := conn.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
	}); err != nil {
		return 0, fmt.Errorf("device size of %s: %w", dev, err)
	}
	if errno != 0 {
		return 0, fmt.Errorf("device size of %s: BLKGETSIZE64: %w", dev, errno)
	}
	return clamp(size), nil
}

func freeze(mountPoint string) error {
	err := fsIoctl(mountPoint, fiFreeze)
	if err != nil {
		return fmt.Errorf("freeze %s: %w", mountPoint, err)
	}
	return nil
}

func thaw(mountPoint string) error {
	err := fsIoctl(mountPoint, fiThaw)
	if errors.Is(err, unix.EINVAL) {
		return nil // not frozen
	}
	if err != nil {
		return fmt.Errorf("thaw %s: %w", mountPoint, err)
	}
	return nil
}

// fsIoctl runs a freeze or thaw ioctl on the filesystem mounted at
// mountPoint, after checking on the same open directory that it is the
// root of a mount: on a staging directory whose mount is gone, FIFREEZE
// would freeze the node's own root filesystem.
func fsIoctl(mountPoint string, req uint) error {
	fd, err := unix.Open(mountPoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := fdIsMountRoot(fd, mountPoint); err != nil {
		return err
	}
	return unix.IoctlSetInt(fd, req, 0)
}

func checkMountRoot(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fdIsMountRoot(fd, path)
}

// fdIsMountRoot returns ErrNotMountPoint unless the directory open at fd
// is the root of a mount. statx reports that directly since Linux 5.8;
// older kernels fall back to comparing the device with the parent's,
// which is right for a filesystem mounted on a directory of another one,
// the only case filevol freezes or grows.
func fdIsMountRoot(fd int, path string) error {
	var stx unix.Statx_t
	err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &stx)
	if err != nil {
		return err
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		if stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
			return fmt.Errorf("%w: %s", ErrNotMountPoint, path)
		}
		return nil
	}
	var parent unix.Stat_t
	if err := unix.Stat(filepath.Join(path, ".."), &parent); err != nil {
		return err
	}
	if uint64(parent.Dev) == unix.Mkdev(stx.Dev_major, stx.Dev_minor) {
		return fmt.Errorf("%w: %s", ErrNotMountPoint, path)
	}
	return nil
}

// hasCapSysResource reports whether this process has CAP_SYS_RESOURCE in
// its effective set; the kernel demands it for online ext4 resizing.
func hasCapSysResource() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return true // unknown: do not blame capabilities
	}
	return data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) != 0
}
