package imagenode

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// growSlack: a filesystem is grown only when the device exceeds it by at
// least this much. Every filevol size is a whole number of MiB, so a real
// expansion adds at least one; filesystems may leave a smaller tail unused
// (a last group too small to hold its metadata), and that must not make
// every stage run a resize tool.
const growSlack = volume.AllocationUnit

// refreshLoopSize makes an attached device see its image's current size
// (LOOP_SET_CAPACITY): a device attached before ControllerExpandVolume
// keeps the old size until told, and the growth below compares with it.
func (b *Node) refreshLoopSize(dev loop.Device, image string) (loop.Device, error) {
	st, err := os.Stat(image)
	if err != nil {
		return dev, fmt.Errorf("stat image %s: %w", image, err)
	}
	if dev.SizeBytes >= st.Size() {
		return dev, nil
	}
	size, err := b.host.Loops.SetCapacity(dev.Path)
	if err != nil {
		return dev, fmt.Errorf("refresh the size of %s to its image's %d bytes: %w", dev.Path, st.Size(), err)
	}
	klog.InfoS("loop device resized to its image", "device", dev.Path, "fromBytes", dev.SizeBytes, "toBytes", size)
	dev.SizeBytes = size
	return dev, nil
}

// fsBehind reports whether the fsType filesystem on dev covers less of it
// than it could (by the superblock: see fs.Size for what a mounted xfs
// may answer).
func (b *Node) fsBehind(dev loop.Device, fsType string) (bool, int64, error) {
	fsSize, err := b.host.FS.Size(dev.Path, fsType)
	if err != nil {
		return false, 0, err
	}
	behind := dev.SizeBytes-fsSize >= growSlack
	if behind && dev.SizeBytes < fs.MinGrowSize[fsType] {
		// The controller rounds growth up to this; a device below it
		// (limit_bytes forbade the rounding) keeps its filesystem as is.
		klog.InfoS("filesystem cannot grow to less than its minimum; left at its size", "device", dev.Path,
			"fsType", fsType, "fsBytes", fsSize, "deviceBytes", dev.SizeBytes, "minimumBytes", fs.MinGrowSize[fsType])
		return false, fsSize, nil
	}
	return behind, fsSize, nil
}

// growBeforeMount grows an ext4 filesystem that is smaller than its device
// (a restore or clone into a bigger volume, an expansion while unstaged, or
// an online growth refused for want of CAP_SYS_RESOURCE) before it is
// mounted: offline resize2fs, after the e2fsck -f it demands, needs no
// capability, and an unmounted filesystem is where e2fsck can check it.
// Other types grow after the mount (growAfterMount).
//
// resize2fs is not atomic, so the growth is marked in the pool while it
// runs (nodestate: Grow): a stage that finds the mark repairs what the
// interrupted resize left (e2fsck -y) and grows again.
func (b *Node) growBeforeMount(ctx context.Context, vol volume.Volume, dev loop.Device, fsType string) error {
	if fsType != "ext4" {
		return nil
	}
	interrupted := b.pool.NodeState().Grow.IsSet(vol.ID)
	behind, fsSize, err := b.fsBehind(dev, fsType)
	if err != nil && !interrupted {
		return err
	}
	if !behind && !interrupted {
		return nil
	}
	// Mounted elsewhere already (the same filesystem): offline is not an
	// option; the mount below joins the existing one.
	if table, err := b.host.Mounts.Table(); err != nil {
		return err
	} else if ms := volview.MountsOf(table, dev); len(ms) > 0 {
		klog.InfoS("filesystem already mounted elsewhere; not grown offline", "volumeID", vol.ID, "device", dev.Path, "mountPoint", ms[0].MountPoint)
		return nil
	}
	if interrupted {
		klog.InfoS("an offline growth of this filesystem was interrupted; repairing it (e2fsck -y) and growing again", "volumeID", vol.ID, "device", dev.Path)
	}
	if err := b.pool.NodeState().Grow.Set(vol.ID); err != nil {
		return fmt.Errorf("mark volume %s as growing: %w", vol.ID, err)
	}
	if err := b.host.FS.GrowOffline(ctx, dev.Path, fsType, interrupted); err != nil {
		if errors.Is(err, fs.ErrInUse) {
			// Still held (mounted elsewhere, a superblock not yet
			// released): untouched, so mountable; it grows another time.
			klog.InfoS("device in use; filesystem not grown at this stage", "volumeID", vol.ID, "device", dev.Path, "err", err)
			if !interrupted {
				return b.pool.NodeState().Grow.Clear(vol.ID)
			}
			return nil
		}
		return fmt.Errorf("grow the ext4 filesystem of volume %s from %d to %d bytes before mounting it: %w", vol.ID, fsSize, dev.SizeBytes, err)
	}
	if err := b.pool.NodeState().Grow.Clear(vol.ID); err != nil {
		return err
	}
	klog.InfoS("filesystem grown at stage (offline)", "volumeID", vol.ID, "device", dev.Path, "fsType", fsType, "fromBytes", fsSize, "toBytes", dev.SizeBytes)
	return nil
}

// growAfterMount grows an xfs or btrfs filesystem smaller than its device,
// now mounted at staging (they grow only mounted).
func (b *Node) growAfterMount(ctx context.Context, vol volume.Volume, dev loop.Device, staging, fsType string) error {
	if fsType == "ext4" {
		return nil
	}
	behind, fsSize, err := b.fsBehind(dev, fsType)
	if err != nil || !behind {
		return err
	}
	if err := b.host.FS.Grow(ctx, dev.Path, staging, fsType); err != nil {
		return fmt.Errorf("grow the %s filesystem of volume %s at %s from %d to %d bytes: %w", fsType, vol.ID, staging, fsSize, dev.SizeBytes, err)
	}
	klog.InfoS("filesystem grown at stage", "volumeID", vol.ID, "device", dev.Path, "fsType", fsType, "fromBytes", fsSize, "toBytes", dev.SizeBytes)
	return nil
}
