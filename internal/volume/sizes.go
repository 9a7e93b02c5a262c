package volume

import "fmt"

// AllocationUnit: every size filevol gives a volume is a multiple of it,
// so that an image, its loop device and its filesystem agree on the size
// whatever the request's rounding.
const AllocationUnit = 1 << 20

// RoundUp rounds n bytes up to the allocation unit.
func RoundUp(n int64) int64 { return (n + AllocationUnit - 1) / AllocationUnit * AllocationUnit }

// AlwaysMountOptions are added to every mount and bind of a volume:
// nothing a pod writes into a volume becomes a setuid program or a device
// node on the host.
var AlwaysMountOptions = []string{"nosuid", "nodev"}

// CheckGrow refuses to give volume id of capacity bytes a smaller size
// (ErrShrink, CSI OUT_OF_RANGE); the same size is no error, as CSI asks
// of a retried expansion.
func CheckGrow(id string, capacity, size int64) error {
	if size < capacity {
		return fmt.Errorf("%w: volume %s has %d bytes, %d requested", ErrShrink, id, capacity, size)
	}
	return nil
}
