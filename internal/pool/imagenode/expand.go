package imagenode

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// Expand makes a staged volume use what ControllerExpandVolume gave its
// image: every loop device of the image re-reads its size
// (LOOP_SET_CAPACITY), then a filesystem grows while mounted (resize2fs,
// xfs_growfs, btrfs filesystem resize). Block volumes stop after the
// device. A filesystem that already fills its device is left alone.
// Online ext4 growth needs CAP_SYS_RESOURCE; without it the call fails
// with FAILED_PRECONDITION saying so, and the next Stage grows the
// filesystem offline instead.
func (b *Node) Expand(ctx context.Context, vol volume.Volume, r volume.ExpandRequest) (int64, error) {
	size, err := b.expandImage(ctx, vol, r.RequiredBytes, r.LimitBytes)
	if err != nil {
		return 0, err
	}
	devs, err := b.refreshDevices(vol.ID)
	if err != nil {
		return 0, err
	}
	table, err := b.host.Mounts.Table()
	if err != nil {
		return 0, err
	}
	top, ok := table.Top(r.VolumePath)
	if !ok && r.StagingPath != "" {
		top, ok = table.Top(volview.StagedDevicePath(r.StagingPath)) // a staged block volume
	}
	if !ok {
		return 0, answer.NotFound("volume %s is neither staged nor published at %s", vol.ID, r.VolumePath)
	}
	if err := b.growMounted(ctx, vol.ID, devs, table, top, r.StagingPath); err != nil {
		return 0, err
	}
	return size, nil
}

// expandImage returns the image's size, first growing the image to what
// the request requires when it is smaller: the controller deferred the
// expansion to this node, whose pool holds the image.
func (b *Node) expandImage(ctx context.Context, vol volume.Volume, req, lim int64) (int64, error) {
	image := b.pool.ImagePath(vol.ID)
	st, err := os.Stat(image)
	if errors.Is(err, os.ErrNotExist) {
		return 0, answer.FailedPrecondition("image file %s of volume %s is missing", image, vol.ID)
	} else if err != nil {
		return 0, err
	}
	size := st.Size()
	if req <= size {
		return size, nil
	}
	want := fs.GrowTarget(vol.FSType, vol.CapacityBytes, volume.RoundUp(req), lim)
	if lim > 0 && want > lim {
		return 0, answer.OutOfRange("required_bytes %d rounds up to %d, above limit_bytes %d", req, want, lim)
	}
	grown, err := b.pool.Expand(ctx, vol.ID, want, volume.RoundUp(req))
	if err != nil {
		return 0, err
	}
	klog.InfoS("volume image expanded on its node", "volumeID", vol.ID, "fromBytes", size, "toBytes", grown.CapacityBytes)
	return grown.CapacityBytes, nil
}

// refreshDevices makes every loop device of the volume's image see the
// image's size. A volume with none is not staged here.
func (b *Node) refreshDevices(id string) ([]loop.Device, error) {
	image := b.pool.ImagePath(id)
	devs, err := b.host.Loops.Find(image)
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, answer.FailedPrecondition("volume %s is not staged on node %s (no loop device backs %s); NodeStageVolume grows it when it is", id, b.node, image)
	}
	for i := range devs {
		if devs[i], err = b.refreshLoopSize(devs[i], image); err != nil {
			return nil, err
		}
	}
	return devs, nil
}

// growMounted grows the filesystem of the volume's device mounted at top,
// unless it already fills the device or is read-only. A block volume (top
// binds the device node) has nothing more to grow.
func (b *Node) growMounted(ctx context.Context, id string, devs []loop.Device, table mount.Table, top mount.Info, staging string) error {
	dev, ok := volview.DeviceOf(devs, top)
	switch {
	case volview.IsDeviceBind(top) && !ok:
		return answer.NotFound("%s is a bind of /dev%s, not of volume %s", top.MountPoint, top.Root, id)
	case volview.IsDeviceBind(top):
		klog.InfoS("block volume expanded", "volumeID", id, "bytes", dev.SizeBytes)
		return nil
	case !ok:
		return answer.NotFound("%s is a mount of %s, not of volume %s", top.MountPoint, top.Source, id)
	case top.ReadOnly():
		klog.InfoS("read-only filesystem not grown; it grows at its next read-write stage", "volumeID", id, "path", top.MountPoint)
		return nil
	}
	behind, fsSize, err := b.fsBehind(dev, top.FSType)
	if err != nil || !behind {
		return err
	}
	mp := fsRootMount(table, top, staging)
	if err := b.host.FS.Grow(ctx, dev.Path, mp, top.FSType); err != nil {
		if errors.Is(err, fs.ErrCapability) {
			return fmt.Errorf("volume %s: %w; its device already has the new size, and the next NodeStageVolume grows the filesystem offline (restart the pod to unstage and stage it)", id, err)
		}
		return fmt.Errorf("grow the %s filesystem of volume %s at %s: %w", top.FSType, id, mp, err)
	}
	klog.InfoS("volume expanded online", "volumeID", id, "fsType", top.FSType, "fromBytes", fsSize, "toBytes", dev.SizeBytes, "mountPoint", mp)
	return nil
}

// fsRootMount picks where to grow the filesystem mounted at top: the
// grow tools act on a mount of the filesystem's root, which the staging
// mount always is (a publish bind of it too); a bind of a subdirectory is not.
func fsRootMount(table mount.Table, top mount.Info, staging string) string {
	if staging != "" {
		if m, ok := table.Top(staging); ok && m.Root == "/" && m.Major == top.Major && m.Minor == top.Minor {
			return m.MountPoint
		}
	}
	return top.MountPoint
}
