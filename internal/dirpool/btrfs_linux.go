package dirpool

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The btrfs ioctls this package uses (linux/btrfs.h). Each takes a
// directory descriptor and, where a name is needed, one path component:
// no path is resolved by the kernel on the driver's behalf, so nothing a
// pod put inside a volume (a symlink, "..") can redirect them.
const (
	iocSubvolCreate = 0x5000940e // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	iocSnapDestroy  = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	iocInoLookup    = 0xd0009412 // _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)
	iocSnapCreateV2 = 0x50009417 // _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
	iocFSInfo       = 0x8400941f // _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args)
	iocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	iocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)
	iocQgroupAssign = 0x40189429 // _IOW(0x94, 41, struct btrfs_ioctl_qgroup_assign_args)
	iocQgroupCreate = 0x4010942a // _IOW(0x94, 42, struct btrfs_ioctl_qgroup_create_args)

	quotaCtlEnable    = 1
	quotaCtlSimple    = 4 // BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA (Linux 6.7)
	qgroupLevelShift  = 48
	qgroupLimitRfer   = 1 << 0 // BTRFS_QGROUP_LIMIT_MAX_RFER
	subvolRdonly      = 1 << 1 // BTRFS_SUBVOL_RDONLY
	firstFreeObjectID = 256    // the inode number of every subvolume's root
	volNameMax        = 4087   // BTRFS_PATH_NAME_MAX
	subvolNameMax     = 4039   // BTRFS_SUBVOL_NAME_MAX
)

type volArgs struct {
	fd   int64
	name [volNameMax + 1]byte
}

type volArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	unused  [4]uint64
	name    [subvolNameMax + 1]byte
}

type inoLookupArgs struct {
	treeid, objectid uint64
	name             [4080]byte
}

type fsInfoArgs struct {
	maxID, numDevices uint64
	fsid              [16]byte
	rest              [1024 - 32]byte
}

type quotaCtlArgs struct{ cmd, status uint64 }

type qgroupAssignArgs struct{ assign, src, dst uint64 }

type qgroupCreateArgs struct{ create, qgroupid uint64 }

type qgroupLimitArgs struct {
	qgroupid                                  uint64
	flags, maxRfer, maxExcl, rsvRfer, rsvExcl uint64
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// checkComponent refuses a name that is not one plain path component.
func checkComponent(name string, max int) error {
	if name == "" || name == "." || name == ".." || len(name) > max || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%w: %q is not a single path component", ErrInvalidPath, name)
	}
	return nil
}

// createSubvolume makes the subvolume name in the directory parent.
func createSubvolume(parent int, name string) error {
	return namedIoctl(parent, name, iocSubvolCreate, "create")
}

// namedIoctl is a btrfs ioctl on the directory parent whose argument
// (volArgs) names one subvolume in it: create or delete; what names it in
// the error, as btrfs subvolume does.
func namedIoctl(parent int, name string, req uintptr, what string) error {
	if err := checkComponent(name, volNameMax); err != nil {
		return err
	}
	var a volArgs
	copy(a.name[:], name)
	if err := ioctl(parent, req, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("btrfs subvolume %s %s: %w", what, name, err)
	}
	return nil
}

// snapshotSubvolume makes name in parent a snapshot of the subvolume
// whose root src is open; read-only when readOnly.
func snapshotSubvolume(src, parent int, name string, readOnly bool) error {
	if err := checkComponent(name, subvolNameMax); err != nil {
		return err
	}
	a := volArgsV2{fd: int64(src)}
	if readOnly {
		a.flags = subvolRdonly
	}
	copy(a.name[:], name)
	if err := ioctl(parent, iocSnapCreateV2, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("btrfs subvolume snapshot %s: %w", name, err)
	}
	return nil
}

// destroySubvolume deletes the subvolume name in parent, with everything
// in it (the kernel's cleaner frees its extents afterwards).
func destroySubvolume(parent int, name string) error {
	return namedIoctl(parent, name, iocSnapDestroy, "delete")
}

// subvolumeID returns the ID of the subvolume that holds fd's inode.
func subvolumeID(fd int) (uint64, error) {
	a := inoLookupArgs{objectid: firstFreeObjectID}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&a)); err != nil {
		return 0, fmt.Errorf("btrfs subvolume ID: %w", err)
	}
	return a.treeid, nil
}

// fsUUID returns the filesystem's UUID as sysfs names it.
func fsUUID(fd int) (string, error) {
	var a fsInfoArgs
	if err := ioctl(fd, iocFSInfo, unsafe.Pointer(&a)); err != nil {
		return "", fmt.Errorf("btrfs filesystem info: %w", err)
	}
	u := a.fsid
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// enableQuota turns quotas on in mode cmd (quotaCtlEnable: full
// qgroups; quotaCtlSimple: simple quotas).
func enableQuota(fd int, cmd uint64) error {
	a := quotaCtlArgs{cmd: cmd}
	if err := ioctl(fd, iocQuotaCtl, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("btrfs quota enable: %w", err)
	}
	return nil
}

// qgroupID is the kernel's number of qgroup level/id.
func qgroupID(level, id uint64) uint64 { return level<<qgroupLevelShift | id }

// limitQgroup sets the referenced-bytes limit of qgroup qgid (0: the
// subvolume whose root fd is open, 0/<its ID>); writes past it get
// EDQUOT. bytes < 0 lifts the limit.
func limitQgroup(fd int, qgid uint64, bytes int64) error {
	a := qgroupLimitArgs{qgroupid: qgid, flags: qgroupLimitRfer, maxRfer: uint64(bytes)}
	if bytes < 0 {
		a.maxRfer = ^uint64(0)
	}
	if err := ioctl(fd, iocQgroupLimit, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("btrfs qgroup limit %d/%d: %w", qgid>>qgroupLevelShift, qgid&(1<<qgroupLevelShift-1), err)
	}
	return nil
}

// createQgroup makes (or, with create false, destroys) qgroup qgid in the
// filesystem of fd.
func createQgroup(fd int, qgid uint64, create bool) error {
	a := qgroupCreateArgs{qgroupid: qgid}
	if create {
		a.create = 1
	}
	if err := ioctl(fd, iocQgroupCreate, unsafe.Pointer(&a)); err != nil {
		return err
	}
	return nil
}

// assignQgroup makes qgroup src a member of dst (with assign false:
// no longer one).
func assignQgroup(fd int, src, dst uint64, assign bool) error {
	a := qgroupAssignArgs{src: src, dst: dst}
	if assign {
		a.assign = 1
	}
	if err := ioctl(fd, iocQgroupAssign, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("btrfs qgroup assign %t: %w", assign, err)
	}
	return nil
}

// qgroupUsage reads the referenced bytes and the limit of qgroup
// level/id from sysfs (/sys/fs/btrfs/<uuid>/qgroups/<level>_<id>), which
// the kernel updates at each transaction commit.
func qgroupUsage(uuid string, level, id uint64) (used, limit int64, err error) {
	dir := fmt.Sprintf("/sys/fs/btrfs/%s/qgroups/%d_%d/", uuid, level, id)
	read := func(name string) (int64, error) {
		v, err := readSysfsUint(dir + name)
		return int64(v), err
	}
	if used, err = read("referenced"); err != nil {
		return 0, 0, fmt.Errorf("qgroup usage: %w", err)
	}
	if limit, err = read("max_referenced"); err != nil {
		return 0, 0, fmt.Errorf("qgroup limit: %w", err)
	}
	return used, limit, nil
}

// readSysfsUint reads a number from a sysfs file. (limit_flags is
// printed in hex with a 0x prefix, the sizes in decimal.)
func readSysfsUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64)
}

// openBeneath opens the directory rel under root without following any
// symlink and without leaving root ("..", absolute paths and magic links
// are refused by the kernel: openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS).
func openBeneath(root int, rel string) (int, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	fd, err := unix.Openat2(root, rel, how)
	// EAGAIN: a rename anywhere on the filesystem raced the lookup (the
	// kernel cannot then prove the path stayed beneath root); retry.
	for i := 0; errors.Is(err, unix.EAGAIN) && i < openRetries; i++ {
		fd, err = unix.Openat2(root, rel, how)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, err
		}
		return -1, fmt.Errorf("open %s beneath the pool: %w", rel, err)
	}
	return fd, nil
}

// openRetries bounds openBeneath's retries after EAGAIN.
const openRetries = 64

// isSubvolumeRoot reports whether fd is the root of a subvolume.
func isSubvolumeRoot(fd int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	return st.Ino == firstFreeObjectID, nil
}
