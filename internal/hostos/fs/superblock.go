package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrNoSuperblock: the device does not carry the superblock of the type
// asked for.
var ErrNoSuperblock = errors.New("no superblock of that filesystem type")

// Size returns the size in bytes of the fstype filesystem on dev, as its
// superblock on the device records it: what the filesystem covers, which
// is less than the device after the device grew and before the filesystem
// did. It reads 4 KiB of the device; nothing is run.
//
// The read is O_DIRECT: the device's page cache may hold a superblock read
// before a filesystem was mounted and grown (xfs writes its metadata past
// that cache), or one of the volume the loop device held before. On disk,
// a mounted filesystem's superblock may lag its last growth for a few
// seconds — older, never larger than the truth. Callers use Size to skip
// growing a filesystem that already fills its device, where an older answer
// only costs an unneeded grow, which is idempotent.
func Size(dev, fstype string) (int64, error) { return superblockSize(dev, fstype) }

// Superblock locations and fields (ext4: fs/ext4/ext4.h; xfs: xfs_format.h;
// btrfs: ctree.h, all on-disk formats fixed for decades).
const (
	ext4SBOffset      = 1024
	ext4Magic         = 0xEF53
	ext4Incompat64Bit = 0x80
	btrfsSBOffset     = 64 << 10
	btrfsMagic        = "_BHRfS_M"
	xfsMagic          = "XFSB"
)

// sbRead is what every superblock read fetches: one aligned 4 KiB block,
// a multiple of any logical block size a loop device has, as O_DIRECT needs.
const sbRead = 4096

func superblockSize(dev, fstype string) (int64, error) {
	read := func(off int64, n int) ([]byte, error) {
		b, err := readDirect(dev, off)
		if err != nil {
			return nil, fmt.Errorf("filesystem size of %s: read %d bytes at %d: %w", dev, sbRead, off, err)
		}
		return b[:n], nil
	}
	le := binary.LittleEndian
	switch fstype {
	case "ext4":
		b, err := read(0, sbRead)
		if err != nil {
			return 0, err
		}
		b = b[ext4SBOffset:]
		if le.Uint16(b[0x38:]) != ext4Magic {
			return 0, fmt.Errorf("%s: %w %s", dev, ErrNoSuperblock, fstype)
		}
		blocks := uint64(le.Uint32(b[0x4:]))
		if le.Uint32(b[0x60:])&ext4Incompat64Bit != 0 {
			blocks |= uint64(le.Uint32(b[0x150:])) << 32
		}
		logBS := le.Uint32(b[0x18:])
		if logBS > 6 { // block sizes run 1 KiB .. 64 KiB
			return 0, fmt.Errorf("%s: %w %s (block size 2^%d KiB)", dev, ErrNoSuperblock, fstype, logBS)
		}
		return sat(blocks * (1024 << logBS)), nil
	case "xfs":
		b, err := read(0, 512)
		if err != nil {
			return 0, err
		}
		if string(b[0:4]) != xfsMagic {
			return 0, fmt.Errorf("%s: %w %s", dev, ErrNoSuperblock, fstype)
		}
		be := binary.BigEndian
		return sat(be.Uint64(b[8:]) * uint64(be.Uint32(b[4:]))), nil
	case "btrfs":
		b, err := read(btrfsSBOffset, sbRead)
		if err != nil {
			return 0, err
		}
		if string(b[0x40:0x48]) != btrfsMagic {
			return 0, fmt.Errorf("%s: %w %s", dev, ErrNoSuperblock, fstype)
		}
		return sat(le.Uint64(b[0x70:])), nil // total_bytes (one device)
	default:
		return 0, fmt.Errorf("filesystem size of %s: %w: %q", dev, ErrUnsupported, fstype)
	}
}

// sat converts to int64, saturating: a corrupt superblock must not turn
// into a negative size.
func sat(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}
