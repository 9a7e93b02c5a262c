package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// NodeGetVolumeStats reports what the backend measures of the volume at
// the path: bytes and inodes of a mounted filesystem, the size of a block
// volume. Conditions are NodeGetVolumeHealth's job.
func (s *NodeService) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	if path == "" {
		return nil, invalidArgument("volume path is missing")
	}
	nv, vol, err := s.nodeVolume(id)
	if err != nil {
		return nil, err
	}
	if err := checkPath("volume path", path); err != nil {
		return nil, notFound("volume %s is not at %q: %v", id, truncate(path), err)
	}
	path = filepath.Clean(path)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, notFound("volume path %s does not exist", path)
	}
	usage, err := nv.Stats(ctx, vol, path)
	if err != nil {
		return nil, err
	}
	return &csipb.NodeGetVolumeStatsResponse{Usage: usage}, nil
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
