package csi

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// nearlyFullPercent is the free-space share under which the pool is
// reported STORAGE_DEGRADED: thin volumes will soon see ENOSPC.
const nearlyFullPercent = 5

// NodeGetVolumeHealth reports the node-side health of a volume, as its
// backend sees it (for an image: its image, its loop devices and the
// mounts at the given publish and staging paths).
func (s *NodeService) NodeGetVolumeHealth(ctx context.Context, req *csipb.NodeGetVolumeHealthRequest) (*csipb.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	for _, p := range []struct{ what, path string }{
		{"volume publish path", req.GetVolumePublishPath()}, {"staging target path", req.GetStagingTargetPath()},
	} {
		if p.path != "" {
			if err := checkPath(p.what, p.path); err != nil {
				return nil, err
			}
		}
	}
	nv, vol, err := s.nodeVolume(id)
	if err != nil {
		return nil, err
	}
	st, err := nv.Health(ctx, vol, req.GetVolumePublishPath(), req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	st = append(st, s.qosHealth(id)...)
	return &csipb.NodeGetVolumeHealthResponse{VolumeHealth: &csipb.VolumeHealth{VolumeId: id, HealthStatuses: st}}, nil
}

// NodeGetStorageHealth reports the pool: unreachable when it cannot be
// written, degraded when nearly full.
func (s *NodeService) NodeGetStorageHealth(ctx context.Context, req *csipb.NodeGetStorageHealthRequest) (*csipb.NodeGetStorageHealthResponse, error) {
	resp := &csipb.NodeGetStorageHealthResponse{}
	if err := poolUsable(s.pool); err != nil {
		resp.BackendHealth = append(resp.BackendHealth, &csipb.NodeGetStorageHealthResponse_StorageBackendHealth{
			Status: csipb.StorageHealthErrorType_STORAGE_UNREACHABLE, Reason: "PoolUnusable", Message: err.Error(),
		})
		return resp, nil
	}
	c, err := s.pool.Capacity()
	if err != nil {
		return nil, err
	}
	if c.TotalBytes > 0 && c.FreeBytes*100/c.TotalBytes < nearlyFullPercent {
		resp.BackendHealth = append(resp.BackendHealth, &csipb.NodeGetStorageHealthResponse_StorageBackendHealth{
			Status: csipb.StorageHealthErrorType_STORAGE_DEGRADED, Reason: "PoolNearlyFull",
			Message: fmt.Sprintf("pool %s has %d of %d bytes free; thin volumes may run out of space", s.pool.Dir(), c.FreeBytes, c.TotalBytes),
		})
	}
	return resp, nil
}

// poolUsable is shared with Probe: the pool directory must exist and be
// writable on a writable filesystem.
func poolUsable(p ImagePool) error { return checkPoolDir(p.Dir()) }
