package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// ErrNoSuperblock: the device does not carry the superblock of the type
// asked for.
var ErrNoSuperblock = errors.New("no superblock of that filesystem type")

// Size returns the size in bytes of the fstype filesystem on dev, as its
// superblock records it: what the filesystem covers, which is less than
// the device after the device grew and before the filesystem did. It reads
// a few KiB of the device; nothing is run.
//
// The read goes through the block device's page cache. For an unmounted
// device that is its content; for a mounted ext4 or btrfs it is the
// superblock the kernel keeps there; a mounted xfs writes its superblock
// past that cache, so the answer may be older — never larger — than the
// truth. Callers use it to skip growing when the filesystem already fills
// the device, where an older answer only costs an unneeded (idempotent) grow.
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

func superblockSize(dev, fstype string) (int64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, fmt.Errorf("filesystem size: %w", err)
	}
	defer f.Close()
	read := func(off int64, n int) ([]byte, error) {
		b := make([]byte, n)
		if _, err := f.ReadAt(b, off); err != nil && !(errors.Is(err, io.EOF)) {
			return nil, fmt.Errorf("filesystem size of %s: read %d bytes at %d: %w", dev, n, off, err)
		}
		return b, nil
	}
	le := binary.LittleEndian
	switch fstype {
	case "ext4":
		b, err := read(ext4SBOffset, 1024)
		if err != nil {
			return 0, err
		}
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
		b, err := read(btrfsSBOffset, 4096)
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
