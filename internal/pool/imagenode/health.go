package imagenode

import (
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// imageHealth is what can be said from the pool and sysfs alone (the
// controller's view): the image must exist, and no device may still hold
// a deleted image (its data goes when the device is detached).
func imageHealth(p *pool.Pool, id string, devs []loop.Device) []*csipb.VolumeHealth_VolumeHealthEntry {
	var out []*csipb.VolumeHealth_VolumeHealthEntry
	if p.ImageLost(id) {
		out = append(out, answer.HealthEntry(csipb.VolumeHealthErrorType_DATA_LOSS, volume.ReasonImageMissing,
			"image file "+p.ImagePath(id)+" is missing from the pool"))
	}
	for _, d := range devs {
		if d.Deleted {
			out = append(out, answer.HealthEntry(csipb.VolumeHealthErrorType_DATA_LOSS, volume.ReasonImageDeleted,
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
				out = append(out, answer.HealthEntry(csipb.VolumeHealthErrorType_INACCESSIBLE, volume.ReasonLoopDeviceGone,
					"loop device /dev"+m.Root+" published at "+m.MountPoint+" is no longer attached to the volume's image"))
			}
			continue
		}
		if !roSeen && slices.Contains(m.SuperOptions, "ro") && !slices.Contains(m.Options, "ro") {
			roSeen = true
			out = append(out, answer.HealthEntry(csipb.VolumeHealthErrorType_DEGRADED, volume.ReasonFilesystemReadOnly,
				"the filesystem mounted at "+m.MountPoint+" was remounted read-only by the kernel (I/O or filesystem errors; see the kernel log)"))
		}
	}
	return out
}
