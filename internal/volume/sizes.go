package volume

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
