package volume

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

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

// What a directory pool (or its node half) notes of a volume, for
// people: SizeNote when its size is not enforced (a pool without quota),
// GuardNote when the pool's quota guard repaired a pod's escape from it;
// "" when there is nothing to say.
type (
	sizeNoter  interface{ SizeNote(id string) string }
	guardNoter interface{ GuardNote(id string) string }
)

// NotedHealth is a DEGRADED entry for each note x has of the volume.
func NotedHealth(x any, id string) []*csipb.VolumeHealth_VolumeHealthEntry {
	var out []*csipb.VolumeHealth_VolumeHealthEntry
	add := func(reason, note string) {
		if note != "" {
			out = append(out, HealthEntry(csipb.VolumeHealthErrorType_DEGRADED, reason, note))
		}
	}
	if n, ok := x.(sizeNoter); ok {
		add(ReasonSizeNotEnforced, n.SizeNote(id))
	}
	if n, ok := x.(guardNoter); ok {
		add(ReasonQuotaEscapeRepaired, n.GuardNote(id))
	}
	return out
}

// HealthEntry is one condition of a volume.
func HealthEntry(t csipb.VolumeHealthErrorType, reason, msg string) *csipb.VolumeHealth_VolumeHealthEntry {
	return &csipb.VolumeHealth_VolumeHealthEntry{Status: t, Reason: reason, Message: msg}
}
