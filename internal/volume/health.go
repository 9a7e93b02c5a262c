package volume

// Volume health (CSI v1.13 replaced VOLUME_CONDITION by VolumeHealth).
// Each reason is a CamelCase constant that tools may match on.
const (
	ReasonImageMissing       = "ImageMissing"
	ReasonImageDeleted       = "ImageDeleted"
	ReasonLoopDeviceGone     = "LoopDeviceGone"
	ReasonFilesystemReadOnly = "FilesystemReadOnly"
	ReasonPoolFull           = "PoolFull"
	// ReasonLimitsNotEnforced: the volume's I/O limits could not be
	// written to a pod's cgroup (internal/csi/qos.go); the pod runs unlimited.
	ReasonLimitsNotEnforced = "LimitsNotEnforced"
	// ReasonSizeNotEnforced: a directory volume of a pool without quota,
	// created because its class allowed it (allowUnenforcedSize): its
	// size is a number only, and its usage is the pool filesystem's.
	ReasonSizeNotEnforced = "SizeNotEnforced"
	// ReasonQuotaEscapeRepaired: a process in the pod made a btrfs
	// subvolume outside the directory volume's quota (or in another
	// volume's); the pool's quota guard put it back (dirpool/guard.go).
	ReasonQuotaEscapeRepaired = "QuotaEscapeRepaired"
)
