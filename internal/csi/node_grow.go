package csi

import (
	"context"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/pool"
)

// growSlack: a filesystem is grown only when the device exceeds it by at
// least this much. Every filevol size is a whole number of MiB, so a real
// expansion adds at least one; filesystems may leave a smaller tail unused
// (a last group too small to hold its metadata), and that must not make
// every stage run a resize tool.
const growSlack = allocationUnit

// refreshLoopSize makes an attached device see its image's current size
// (LOOP_SET_CAPACITY): a device attached before ControllerExpandVolume
// keeps the old size until told, and the growth below compares with it.
func (s *NodeService) refreshLoopSize(dev loop.Device, image string) (loop.Device, error) {
	st, err := os.Stat(image)
	if err != nil {
		return dev, fmt.Errorf("stat image %s: %w", image, err)
	}
	if dev.SizeBytes >= st.Size() {
		return dev, nil
	}
	size, err := s.host.SetLoopCapacity(dev.Path)
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
func (s *NodeService) fsBehind(dev loop.Device, fsType string) (bool, int64, error) {
	fsSize, err := s.host.FSSize(dev.Path, fsType)
	if err != nil {
		return false, 0, err
	}
	return dev.SizeBytes-fsSize >= growSlack, fsSize, nil
}

// growBeforeMount grows an ext4 filesystem that is smaller than its device
// (a restore or clone into a bigger volume, an expansion while unstaged, or
// an online growth refused for want of CAP_SYS_RESOURCE) before it is
// mounted: offline resize2fs, after the e2fsck -f it demands, needs no
// capability, and an unmounted filesystem is where e2fsck can check it.
// Other types grow after the mount (growAfterMount).
func (s *NodeService) growBeforeMount(ctx context.Context, vol pool.Volume, dev loop.Device, fsType string) error {
	if fsType != "ext4" {
		return nil
	}
	behind, fsSize, err := s.fsBehind(dev, fsType)
	if err != nil || !behind {
		return err
	}
	if err := s.host.GrowFSOffline(ctx, dev.Path, fsType); err != nil {
		return fmt.Errorf("grow the ext4 filesystem of volume %s from %d to %d bytes before mounting it: %w", vol.ID, fsSize, dev.SizeBytes, err)
	}
	klog.InfoS("filesystem grown at stage (offline)", "volumeID", vol.ID, "device", dev.Path, "fsType", fsType, "fromBytes", fsSize, "toBytes", dev.SizeBytes)
	return nil
}

// growAfterMount grows an xfs or btrfs filesystem smaller than its device,
// now mounted at staging (they grow only mounted).
func (s *NodeService) growAfterMount(ctx context.Context, vol pool.Volume, dev loop.Device, staging, fsType string) error {
	if fsType == "ext4" {
		return nil
	}
	behind, fsSize, err := s.fsBehind(dev, fsType)
	if err != nil || !behind {
		return err
	}
	if err := s.host.GrowFS(ctx, dev.Path, staging, fsType); err != nil {
		return fmt.Errorf("grow the %s filesystem of volume %s at %s from %d to %d bytes: %w", fsType, vol.ID, staging, fsSize, dev.SizeBytes, err)
	}
	klog.InfoS("filesystem grown at stage", "volumeID", vol.ID, "device", dev.Path, "fsType", fsType, "fromBytes", fsSize, "toBytes", dev.SizeBytes)
	return nil
}
