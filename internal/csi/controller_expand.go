package csi

import (
	"context"
	"errors"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/volume"
)

// ControllerExpandVolume grows the volume's image file (thin: ftruncate;
// thick: fallocate of the new range) and its record. The loop device and
// the filesystem follow on the node (NodeExpandVolume, or the next
// NodeStageVolume when the volume is not staged), so node expansion is
// always required. Expanding to the current size or less succeeds (spec:
// "already larger than or equal to the target capacity → OK"); a
// limit_bytes below the current size would be a shrink: OUT_OF_RANGE.
func (s *ControllerService) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	id, cr := req.GetVolumeId(), req.GetCapacityRange()
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	if cr == nil {
		return nil, invalidArgument("capacity range is missing")
	}
	required, limit := cr.GetRequiredBytes(), cr.GetLimitBytes()
	if required < 0 || limit < 0 {
		return nil, invalidArgument("capacity range must not be negative (required_bytes=%d, limit_bytes=%d)", required, limit)
	}
	if c := req.GetVolumeCapability(); c != nil {
		if _, err := checkCapability(c); err != nil {
			return nil, err
		}
	}
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A volume of a pool this controller does not serve is not found,
	// like one missing from a pool it serves (routes.go).
	st, err := s.stores.volume(id)
	var vol volume.Volume
	if err == nil {
		vol, err = st.Get(id)
	}
	if errors.Is(err, volume.ErrNotFound) && s.cfg.DeferExpansion {
		return s.deferToNode(id, required, limit)
	}
	if err != nil {
		return nil, err
	}
	if limit > 0 && limit < vol.CapacityBytes {
		return nil, outOfRange("volume %s has %d bytes and cannot shrink to at most %d", id, vol.CapacityBytes, limit)
	}
	if required > maxVolumeSize {
		return nil, outOfRange("required_bytes %d is larger than the largest volume filevol makes (%d)", required, int64(maxVolumeSize))
	}
	size := roundUp(required, allocationUnit)
	if limit > 0 && size > limit {
		return nil, outOfRange("no size fits the range: required_bytes %d rounds up to %d (allocation unit %d) but limit_bytes is %d",
			required, size, allocationUnit, limit)
	}
	size = fs.GrowTarget(vol.FSType, vol.CapacityBytes, size, limit) // btrfs: ≥ 256 MiB
	// Through the pool even when nothing grows: it records an image an
	// interrupted expansion left larger than its record.
	grown, err := st.Expand(ctx, id, max(size, vol.CapacityBytes), roundUp(required, allocationUnit))
	if err != nil {
		return nil, err
	}
	if grown.CapacityBytes != vol.CapacityBytes {
		klog.InfoS("volume expanded", "volumeID", id, "fromBytes", vol.CapacityBytes, "toBytes", grown.CapacityBytes, "provisioning", grown.Provisioning)
	}
	// A directory volume's quota is raised online: the node has nothing
	// to do. An image's filesystem grows on the node.
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: grown.CapacityBytes, NodeExpansionRequired: st.Traits().NodeExpansion}, nil
}

// deferToNode answers for a volume that lives in another node's pool: a
// controller without that pool (the resizer's Deployment of a node-local
// installation, --defer-expansion-to-node) cannot grow the image, so it
// promises the size and leaves the whole expansion — image, loop device,
// filesystem — to NodeExpandVolume on the volume's node, which kubelet
// calls there online, or at the next stage.
func (s *ControllerService) deferToNode(id string, required, limit int64) (*csipb.ControllerExpandVolumeResponse, error) {
	size := roundUp(required, allocationUnit)
	if limit > 0 && size > limit {
		return nil, outOfRange("no size fits the range: required_bytes %d rounds up to %d (allocation unit %d) but limit_bytes is %d",
			required, size, allocationUnit, limit)
	}
	klog.InfoS("volume not in this pool; expansion deferred to its node", "volumeID", id, "toBytes", size)
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: true}, nil
}
