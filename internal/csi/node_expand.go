package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/filevol/filevol/internal/volume"
)

// NodeExpandVolume has the backend make the staged or published volume
// use the size ControllerExpandVolume gave it (for an image: the loop
// devices re-read the image's size, then the filesystem grows online),
// growing the volume first when the controller deferred that to the node.
// Idempotent: a volume that already has its size is left alone.
func (s *NodeService) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	id, path, staging := req.GetVolumeId(), req.GetVolumePath(), req.GetStagingTargetPath()
	nv, _, unlock, err := s.begin(id, req.GetVolumeCapability(), false, present("volume path", &path))
	if err != nil {
		return nil, err
	}
	defer unlock()
	// The volume first: a volume that does not exist is NOT_FOUND whatever
	// the path (csi-sanity sends a relative one).
	vol, err := nv.Get(id)
	if err != nil {
		return nil, err
	}
	if path, err = s.paths.check("volume path", path); err != nil {
		return nil, err
	}
	if staging != "" {
		if staging, err = s.paths.check("staging target path", staging); err != nil {
			return nil, err
		}
	}
	cr := req.GetCapacityRange()
	size, err := nv.Expand(ctx, vol, volume.ExpandRequest{VolumePath: path, StagingPath: staging,
		RequiredBytes: cr.GetRequiredBytes(), LimitBytes: cr.GetLimitBytes(), Secrets: req.GetSecrets()})
	if err != nil {
		return nil, err
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
