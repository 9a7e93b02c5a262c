package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// ErrCapability: the kernel refused an operation for want of a capability
// this process lacks (online ext4 growth needs CAP_SYS_RESOURCE).
var ErrCapability = errors.New("missing capability")

// ErrInUse: an offline tool found the device mounted or opened exclusively
// by someone else, so it did not touch it.
var ErrInUse = errors.New("device in use")

// MinGrowSize is, where it is above MinSize, the smallest size a
// filesystem can be grown to: btrfs refuses to resize to less than 256 MiB
// (BTRFS_IOC_RESIZE answers EINVAL), so a 128 MiB btrfs cannot grow to
// 200 MiB, only to 256 MiB or more.
var MinGrowSize = map[string]int64{"btrfs": 256 << 20}

// e2fsck(8) exit statuses that leave a filesystem fit to resize: 1 and 2
// mean errors were found and corrected (2 asks for a reboot, which only
// matters for a mounted root).
const (
	e2fsckCorrected       = 1
	e2fsckCorrectedReboot = 2
	e2fsckOperational     = 8 // e.g. the device is in use
)

// GrowOffline grows the unmounted fstype filesystem on dev to fill the
// device. Only ext4 grows offline (xfs grows only mounted, btrfs too); it
// is checked first (e2fsck -f -p), which resize2fs demands. Unlike the
// online EXT4_IOC_RESIZE_FS, offline resize2fs writes the device itself,
// so it needs no CAP_SYS_RESOURCE: it is how an expanded ext4 volume grows
// where online growth is refused.
//
// resize2fs is not atomic. repair says the caller knows an earlier
// GrowOffline of this filesystem was interrupted: the check then answers
// yes to every repair (e2fsck -f -y) instead of only the safe ones (-p,
// which stops at what an interrupted resize leaves).
func (t Tools) GrowOffline(ctx context.Context, dev, fstype string, repair bool) error {
	if fstype != "ext4" {
		return fmt.Errorf("grow %s offline: %w: %q grows only while mounted", dev, ErrUnsupported, fstype)
	}
	mode := "-p"
	if repair {
		mode = "-y"
	}
	out, err := t.R.Run(ctx, "e2fsck", "-f", mode, dev)
	var exitErr *ExitError
	if errors.As(err, &exitErr) && (exitErr.Code == e2fsckCorrected || exitErr.Code == e2fsckCorrectedReboot) {
		err = nil
	}
	if errors.As(err, &exitErr) && exitErr.Code == e2fsckOperational &&
		(bytes.Contains(out, []byte(" is in use")) || bytes.Contains(out, []byte(" is mounted"))) {
		// It opens the device exclusively and says why it could not.
		return fmt.Errorf("grow %s offline: %w: %s", dev, ErrInUse, bytes.TrimSpace(out))
	}
	if err != nil {
		return fmt.Errorf("check %s before growing it (e2fsck %s could not repair it; run e2fsck by hand): %w", dev, mode, err)
	}
	if _, err := t.R.Run(ctx, "resize2fs", dev); err != nil {
		return fmt.Errorf("grow %s offline: %w", dev, err)
	}
	return nil
}
