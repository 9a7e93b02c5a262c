package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// NodeExpandVolume makes a staged volume use what ControllerExpandVolume
// gave its image: every loop device of the image re-reads its size
// (LOOP_SET_CAPACITY), then a filesystem grows while mounted (resize2fs,
// xfs_growfs, btrfs filesystem resize). Block volumes stop after the
// device. Idempotent: a filesystem that already fills its device is left
// alone. Online ext4 growth needs CAP_SYS_RESOURCE; without it the call
// fails with FAILED_PRECONDITION saying so, and the next NodeStageVolume
// grows the filesystem offline instead.
func (s *NodeService) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	if path == "" {
		return nil, invalidArgument("volume path is missing")
	}
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if c := req.GetVolumeCapability(); c != nil {
		if _, err := checkCapability(c); err != nil {
			return nil, err
		}
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// The volume first: a volume that does not exist is NOT_FOUND whatever
	// the path (csi-sanity sends a relative one).
	vol, err := s.pool.Get(id)
	if err != nil {
		return nil, err
	}
	if path, err = s.paths.check("volume path", path); err != nil {
		return nil, err
	}
	staging := req.GetStagingTargetPath()
	if staging != "" {
		if staging, err = s.paths.check("staging target path", staging); err != nil {
			return nil, err
		}
	}
	image := s.pool.ImagePath(id)
	st, err := os.Stat(image)
	if errors.Is(err, os.ErrNotExist) {
		return nil, failedPrecondition("image file %s of volume %s is missing", image, id)
	} else if err != nil {
		return nil, err
	}
	size := st.Size()
	if r := req.GetCapacityRange().GetRequiredBytes(); r > size {
		// The controller deferred the expansion to this node (its pool
		// holds the image): grow the image here first.
		lim := req.GetCapacityRange().GetLimitBytes()
		want := growTarget(vol.FSType, vol.CapacityBytes, roundUp(r, allocationUnit), lim)
		if lim > 0 && want > lim {
			return nil, outOfRange("required_bytes %d rounds up to %d, above limit_bytes %d", r, want, lim)
		}
		grown, err := s.pool.Expand(ctx, id, want)
		if err != nil {
			return nil, err
		}
		klog.InfoS("volume image expanded on its node", "volumeID", id, "fromBytes", size, "toBytes", grown.CapacityBytes)
		size = grown.CapacityBytes
	}
	devs, err := s.host.FindLoop(image)
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, failedPrecondition("volume %s is not staged on node %s (no loop device backs %s); NodeStageVolume grows it when it is", id, s.cfg.NodeID, image)
	}
	for i := range devs {
		if devs[i], err = s.refreshLoopSize(devs[i], image); err != nil {
			return nil, err
		}
	}
	table, err := s.host.Mounts()
	if err != nil {
		return nil, err
	}
	top, ok := topMount(table, path)
	if !ok && staging != "" {
		top, ok = topMount(table, stagedDevicePath(staging)) // a staged block volume
	}
	if !ok {
		return nil, notFound("volume %s is neither staged nor published at %s", id, path)
	}
	resp := &csipb.NodeExpandVolumeResponse{CapacityBytes: size}
	if top.FSType == "devtmpfs" {
		if !boundDeviceAttached(top, devs) {
			return nil, notFound("%s is a bind of /dev%s, not of volume %s", top.MountPoint, top.Root, id)
		}
		klog.InfoS("block volume expanded", "volumeID", id, "bytes", size)
		return resp, nil
	}
	dev, ok := deviceOf(devs, top)
	if !ok {
		return nil, notFound("%s is a mount of %s, not of volume %s", path, top.Source, id)
	}
	if top.ReadOnly() {
		klog.InfoS("read-only filesystem not grown; it grows at its next read-write stage", "volumeID", id, "path", path)
		return resp, nil
	}
	behind, fsSize, err := s.fsBehind(dev, top.FSType)
	if err != nil {
		return nil, err
	}
	if !behind {
		return resp, nil
	}
	mp := fsRootMount(table, top, staging)
	if err := s.host.GrowFS(ctx, dev.Path, mp, top.FSType); err != nil {
		if errors.Is(err, fs.ErrCapability) {
			return nil, fmt.Errorf("volume %s: %w; its device already has the new size, and the next NodeStageVolume grows the filesystem offline (restart the pod to unstage and stage it)", id, err)
		}
		return nil, fmt.Errorf("grow the %s filesystem of volume %s at %s: %w", top.FSType, id, mp, err)
	}
	klog.InfoS("volume expanded online", "volumeID", id, "fsType", top.FSType, "fromBytes", fsSize, "toBytes", dev.SizeBytes, "mountPoint", mp)
	return resp, nil
}

// fsRootMount picks where to grow the filesystem mounted at top: the
// grow tools act on a mount of the filesystem's root, which the staging
// mount always is (a publish bind of it too); a bind of a subdirectory is not.
func fsRootMount(table mount.Table, top mount.Info, staging string) string {
	if staging != "" {
		if m, ok := topMount(table, filepath.Clean(staging)); ok && m.Root == "/" && m.Major == top.Major && m.Minor == top.Minor {
			return m.MountPoint
		}
	}
	return top.MountPoint
}
