package dirpooltest

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a hostile pod calls to escape its quota: the btrfs ioctls any
// owner of a directory may call, with a qgroup inherit list it chose.
const (
	iocSubvolCreateV2   = 0x50009418 // _IOW(0x94, 24, struct btrfs_ioctl_vol_args_v2)
	iocSnapCreateV2     = 0x50009417 // _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
	subvolQgroupInherit = 1 << 2     // BTRFS_SUBVOL_QGROUP_INHERIT
)

type volArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	size    uint64
	inherit unsafe.Pointer
	_       [2]uint64
	name    [4040]byte
}

// qgroupInherit is struct btrfs_qgroup_inherit with room for its list.
type qgroupInherit struct {
	flags, numQgroups, numRefCopies, numExclCopies uint64
	lim                                            [5]uint64
	qgroups                                        [8]uint64
}

// Level1 is the number of a level-1 qgroup 1/id.
func Level1(id uint64) uint64 { return 1<<48 | id }

// EscapeSubvolume makes the subvolume name in the directory dir with
// the given qgroup inherit list (nil: an empty list, which makes the
// kernel skip putting it in its parent's qgroup); with snapshotOf >= 0
// it makes a snapshot of that open subvolume root instead. It is a
// pod's call: run it under AsPod.
func EscapeSubvolume(dir int, name string, inherit []uint64, snapshotOf int) error {
	if len(inherit) > 8 {
		return fmt.Errorf("at most 8 qgroups")
	}
	var in qgroupInherit
	in.numQgroups = uint64(len(inherit))
	copy(in.qgroups[:], inherit)
	a := volArgsV2{flags: subvolQgroupInherit, size: uint64(72 + 8*len(inherit)), inherit: unsafe.Pointer(&in)}
	copy(a.name[:], name)
	req := uintptr(iocSubvolCreateV2)
	if snapshotOf >= 0 {
		a.fd = int64(snapshotOf)
		req = iocSnapCreateV2
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(dir), req, uintptr(unsafe.Pointer(&a))); e != 0 {
		return fmt.Errorf("btrfs subvolume create %s with inherit %v: %w", name, inherit, e)
	}
	return nil
}
