package imagenode

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// Stats reports bytes and inodes of the volume's filesystem mounted at
// path, or the size of its device bound there (a block volume).
func (b *Node) Stats(ctx context.Context, vol volume.Volume, path string) ([]*csipb.VolumeUsage, error) {
	// The mount at path and its device, read now (reading.go):
	// stats only report, and kubelet asks them for every volume at once.
	r, err := b.readAt(ctx, path)
	if err != nil {
		return nil, err
	}
	top, ok := r.Table().Top(path)
	if !ok {
		return nil, answer.NotFound("volume %s is not mounted at %s", vol.ID, path)
	}
	devs, err := r.Devices(b.pool.ImagePath(vol.ID))
	if err != nil {
		return nil, err
	}
	if volview.IsDeviceBind(top) {
		return b.blockStats(vol.ID, top, devs)
	}
	if _, ok := volview.DeviceOf(devs, top); !ok {
		return nil, answer.NotFound("%s is a mount of %s, not of volume %s", path, top.Source, vol.ID)
	}
	return b.fsStats(path)
}

// fsStats answers for a filesystem mounted at path: bytes and inodes.
func (b *Node) fsStats(path string) ([]*csipb.VolumeUsage, error) {
	st, err := b.host.FS.StatFS(path)
	if err != nil {
		return nil, err
	}
	usage := []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: st.TotalBytes, Available: st.AvailableBytes, Used: st.UsedBytes},
	}
	// btrfs allocates inodes dynamically and reports 0 of them: saying
	// "0 of 0 inodes free" would read as a full volume.
	if st.TotalInodes > 0 {
		usage = append(usage, &csipb.VolumeUsage{Unit: csipb.VolumeUsage_INODES, Total: st.TotalInodes, Available: st.FreeInodes, Used: st.UsedInodes})
	}
	return usage, nil
}

// blockStats answers for a block volume published at a target file. A
// device detached under the bind has no size to report: it is reported
// by NodeGetVolumeHealth as LoopDeviceGone.
func (b *Node) blockStats(id string, top mount.Info, devs []loop.Device) ([]*csipb.VolumeUsage, error) {
	if d, ok := volview.DeviceOf(devs, top); ok {
		size, err := b.host.FS.BlockDeviceSize(d.Path)
		if err != nil {
			return nil, err
		}
		return []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: size}}, nil
	}
	return nil, answer.FailedPrecondition("loop device /dev%s published at %s is no longer attached to volume %s", top.Root, top.MountPoint, id)
}

// Health reports the volume's image, its loop devices, the mounts at the
// given publish and staging paths, and a full pool under a thin volume.
func (b *Node) Health(ctx context.Context, vol volume.Volume, publishPath, stagingPath string) ([]*csipb.VolumeHealth_VolumeHealthEntry, error) {
	// The mounts at the paths and their devices, read now; with no path,
	// a reading of every device, shared with the questions asked
	// meanwhile (reading_paths.go, reading.go). Health only reports.
	r, err := b.readAt(ctx, publishPath, stagingPath)
	if err != nil {
		return nil, err
	}
	devs, err := r.Devices(b.pool.ImagePath(vol.ID))
	if err != nil {
		return nil, err
	}
	st := imageHealth(b.pool, vol.ID, devs)
	if publishPath != "" || stagingPath != "" {
		st = append(st, mountHealth(r.Table(), devs, publishPath, stagingPath)...)
	}
	if e := b.poolFullHealth(vol); e != nil {
		st = append(st, e)
	}
	return st, nil
}

// poolFullHealth: a thin volume whose pool has no free space left fails
// every write to a block it has not allocated yet (ENOSPC, or EIO from the
// loop device), although nothing is wrong with the volume itself.
func (b *Node) poolFullHealth(vol volume.Volume) *csipb.VolumeHealth_VolumeHealthEntry {
	if vol.Provisioning == volume.ProvisioningThick {
		return nil
	}
	c, err := b.pool.Capacity()
	if err != nil || c.FreeBytes >= volume.AllocationUnit {
		return nil
	}
	return answer.HealthEntry(csipb.VolumeHealthErrorType_DEGRADED, volume.ReasonPoolFull,
		fmt.Sprintf("the pool %s holding this thin volume has %d bytes free: writes to blocks the volume has not allocated yet fail", b.pool.Dir(), c.FreeBytes))
}
