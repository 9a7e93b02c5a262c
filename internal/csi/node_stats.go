package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volview"
)

// NodeGetVolumeStats reports bytes and inodes of a mounted volume and the
// size of a block volume. Conditions are NodeGetVolumeHealth's job.
func (s *NodeService) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
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
	if _, err := s.pool.Get(id); err != nil {
		return nil, err
	}
	if err := checkPath("volume path", path); err != nil {
		return nil, notFound("volume %s is not at %q: %v", id, truncate(path), err)
	}
	path = filepath.Clean(path)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, notFound("volume path %s does not exist", path)
	}
	table, err := s.host.Mounts.Table()
	if err != nil {
		return nil, err
	}
	top, ok := table.Top(path)
	if !ok {
		return nil, notFound("volume %s is not mounted at %s", id, path)
	}
	devs, err := s.host.Loops.Find(s.pool.ImagePath(id))
	if err != nil {
		return nil, err
	}
	if volview.IsDeviceBind(top) {
		return s.blockStats(id, top, devs)
	}
	if _, ok := volview.DeviceOf(devs, top); !ok {
		return nil, notFound("%s is a mount of %s, not of volume %s", path, top.Source, id)
	}
	return s.fsStats(path)
}

// fsStats answers for a filesystem mounted at path: bytes and inodes.
func (s *NodeService) fsStats(path string) (*csipb.NodeGetVolumeStatsResponse, error) {
	st, err := s.host.FS.StatFS(path)
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
	return &csipb.NodeGetVolumeStatsResponse{Usage: usage}, nil
}

// blockStats answers for a block volume published at a target file. A
// device detached under the bind has no size to report: it is reported
// by NodeGetVolumeHealth as LoopDeviceGone.
func (s *NodeService) blockStats(id string, top mount.Info, devs []loop.Device) (*csipb.NodeGetVolumeStatsResponse, error) {
	if d, ok := volview.DeviceOf(devs, top); ok {
		size, err := s.host.FS.BlockDeviceSize(d.Path)
		if err != nil {
			return nil, err
		}
		return &csipb.NodeGetVolumeStatsResponse{
			Usage: []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: size}},
		}, nil
	}
	return nil, failedPrecondition("loop device /dev%s published at %s is no longer attached to volume %s", top.Root, top.MountPoint, id)
}

// NodeGetCapabilities lists what the node service does.
func (s *NodeService) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csipb.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME, // node_expand.go
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetInfo returns the node ID, its topology and the volume limit.
func (s *NodeService) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{
		NodeId:             s.cfg.NodeID,
		MaxVolumesPerNode:  s.cfg.MaxVolumesPerNode,
		AccessibleTopology: s.cfg.topology(),
	}, nil
}
