package dirpool

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Protections a pod can put on what it owns, which stop a delete for ever
// unless the pool takes them off first:
//
//   - a read-only subvolume (BTRFS_IOC_SUBVOL_SETFLAGS, allowed to the
//     subvolume's owner): nothing inside it can be unlinked, so a
//     subvolume it holds cannot be destroyed (EROFS), and a read-only
//     volume cannot even be renamed into the trash (its ".." changes);
//   - the immutable and append-only inode flags (FS_IOC_SETFLAGS, a pod
//     with CAP_LINUX_IMMUTABLE): an entry with either, or in a directory
//     with either, cannot be unlinked, renamed or destroyed (EPERM).
//
// The pool clears both where they block (the controller holds
// CAP_LINUX_IMMUTABLE for the flags), and only there: the volume is
// being deleted, its data has no one left to protect it for.
const (
	iocSubvolGetflags = 0x80089419 // _IOR(0x94, 25, __u64)
	iocSubvolSetflags = 0x4008941a // _IOW(0x94, 26, __u64)

	fsImmutableFL = 0x10 // FS_IMMUTABLE_FL (linux/fs.h)
	fsAppendFL    = 0x20 // FS_APPEND_FL
	protectFlags  = fsImmutableFL | fsAppendFL
)

// clearProtection clears the immutable and append-only flags of fd's
// inode (a file or directory opened by the caller without following a
// link). A filesystem without inode flags has none to clear.
func clearProtection(fd int) error {
	flags, err := inodeFlags(fd)
	if err != nil || flags&protectFlags == 0 {
		return err
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags&^protectFlags)); err != nil {
		return fmt.Errorf("clear the immutable and append-only flags: %w", err)
	}
	return nil
}

// inodeFlags reads fd's inode flags (0 on a filesystem without them).
func inodeFlags(fd int) (uint32, error) {
	// The kernel reads and writes an int, whatever the ioctl's number says.
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read inode flags: %w", err)
	}
	return flags, nil
}

// makeWritable clears the read-only flag of the subvolume whose root fd
// is open.
func makeWritable(fd int) error {
	var flags uint64
	if err := ioctl(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("btrfs subvolume flags: %w", err)
	}
	if flags&subvolRdonly == 0 {
		return nil
	}
	flags &^= subvolRdonly
	if err := ioctl(fd, iocSubvolSetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("btrfs property set ro false: %w", err)
	}
	return nil
}

// unprotectRoot readies the root of a volume (or of a subvolume inside
// one) to be moved or destroyed: without the inode flags and, for a
// subvolume, writable when writable is set (a volume to be moved; a
// subvolume that holds others) or when its flags must come off (a
// read-only subvolume's cannot: EROFS). Making a subvolume writable
// commits a transaction: only where it is needed.
func unprotectRoot(fd int, subvolume, writable bool) error {
	flags, err := inodeFlags(fd)
	if err != nil {
		return err
	}
	if subvolume && (writable || flags&protectFlags != 0) {
		if err := makeWritable(fd); err != nil {
			return err
		}
	}
	return clearProtection(fd)
}

// unprotectEntry clears the flags of the entry name in dir, which is
// not followed if it is a link. Only regular files and directories carry
// the flags (a device's or a FIFO's ioctls are its driver's), so nothing
// else is opened: a device node is never opened by the pool, not even
// one swapped in after the look (the file is opened as the very inode
// looked at, through its O_PATH descriptor). It reports whether the entry
// is a directory.
func unprotectEntry(dir int, name string) (isDir bool, err error) {
	pfd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return false, err
	}
	var fd int
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err = unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	case unix.S_IFREG:
		// Reopened through the descriptor's own /proc link: the inode
		// already held, not the name again.
		fd, err = unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	default:
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s to clear its flags: %w", name, err)
	}
	defer unix.Close(fd)
	return st.Mode&unix.S_IFMT == unix.S_IFDIR, clearProtection(fd)
}
