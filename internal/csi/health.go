package csi

import (
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volview"
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
	// written to a pod's cgroup (qos.go); the pod runs unlimited.
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

// notedHealth is a DEGRADED entry for each note x has of the volume.
func notedHealth(x any, id string) []*csipb.VolumeHealth_VolumeHealthEntry {
	var out []*csipb.VolumeHealth_VolumeHealthEntry
	add := func(reason, note string) {
		if note != "" {
			out = append(out, healthEntry(csipb.VolumeHealthErrorType_DEGRADED, reason, note))
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

func healthEntry(t csipb.VolumeHealthErrorType, reason, msg string) *csipb.VolumeHealth_VolumeHealthEntry {
	return &csipb.VolumeHealth_VolumeHealthEntry{Status: t, Reason: reason, Message: msg}
}

// imageHealth is what can be said from the pool and sysfs alone (the
// controller's view): the image must exist, and no device may still hold
// a deleted image (its data goes when the device is detached).
func imageHealth(p *pool.Pool, id string, devs []loop.Device) []*csipb.VolumeHealth_VolumeHealthEntry {
	var out []*csipb.VolumeHealth_VolumeHealthEntry
	if p.ImageLost(id) {
		out = append(out, healthEntry(csipb.VolumeHealthErrorType_DATA_LOSS, ReasonImageMissing,
			"image file "+p.ImagePath(id)+" is missing from the pool"))
	}
	for _, d := range devs {
		if d.Deleted {
			out = append(out, healthEntry(csipb.VolumeHealthErrorType_DATA_LOSS, ReasonImageDeleted,
				d.Path+" is backed by a deleted image file; its data is lost when the device is detached"))
			break
		}
	}
	return out
}

// mountHealth checks the mounts at the given paths (staging, publish):
// a filesystem the kernel remounted read-only after errors, or a block
// bind whose loop device was detached underneath it.
func mountHealth(table mount.Table, devs []loop.Device, paths ...string) []*csipb.VolumeHealth_VolumeHealthEntry {
	var out []*csipb.VolumeHealth_VolumeHealthEntry
	roSeen, goneSeen := false, false
	for _, p := range paths {
		if p == "" {
			continue
		}
		m, ok := table.Top(p)
		if !ok {
			continue
		}
		if volview.IsDeviceBind(m) {
			if _, attached := volview.DeviceOf(devs, m); !goneSeen && !attached {
				goneSeen = true
				out = append(out, healthEntry(csipb.VolumeHealthErrorType_INACCESSIBLE, ReasonLoopDeviceGone,
					"loop device /dev"+m.Root+" published at "+m.MountPoint+" is no longer attached to the volume's image"))
			}
			continue
		}
		if !roSeen && slices.Contains(m.SuperOptions, "ro") && !slices.Contains(m.Options, "ro") {
			roSeen = true
			out = append(out, healthEntry(csipb.VolumeHealthErrorType_DEGRADED, ReasonFilesystemReadOnly,
				"the filesystem mounted at "+m.MountPoint+" was remounted read-only by the kernel (I/O or filesystem errors; see the kernel log)"))
		}
	}
	return out
}
