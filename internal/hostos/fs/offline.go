package fs

import (
	"context"
	"errors"
	"fmt"
)

// ErrCapability: the kernel refused an operation for want of a capability
// this process lacks (online ext4 growth needs CAP_SYS_RESOURCE).
var ErrCapability = errors.New("missing capability")

// e2fsck(8) exit statuses that leave a filesystem fit to resize: 1 and 2
// mean errors were found and corrected (2 asks for a reboot, which only
// matters for a mounted root).
const (
	e2fsckCorrected       = 1
	e2fsckCorrectedReboot = 2
)

// GrowOffline grows the unmounted fstype filesystem on dev to fill the
// device. Only ext4 grows offline (xfs grows only mounted, btrfs too); it
// is checked first (e2fsck -f -p), which resize2fs demands. Unlike the
// online EXT4_IOC_RESIZE_FS, offline resize2fs writes the device itself,
// so it needs no CAP_SYS_RESOURCE: it is how an expanded ext4 volume grows
// where online growth is refused.
func (t Tools) GrowOffline(ctx context.Context, dev, fstype string) error {
	if fstype != "ext4" {
		return fmt.Errorf("grow %s offline: %w: %q grows only while mounted", dev, ErrUnsupported, fstype)
	}
	_, err := t.R.Run(ctx, "e2fsck", "-f", "-p", dev)
	var exitErr *ExitError
	if errors.As(err, &exitErr) && (exitErr.Code == e2fsckCorrected || exitErr.Code == e2fsckCorrectedReboot) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("check %s before growing it (e2fsck -p could not repair it; run e2fsck by hand): %w", dev, err)
	}
	if _, err := t.R.Run(ctx, "resize2fs", dev); err != nil {
		return fmt.Errorf("grow %s offline: %w", dev, err)
	}
	return nil
}
