package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/volume"
)

// ControllerGetVolumeHealth reports the pool-side health of one volume; an
// empty status list means no adverse condition is known. What only the
// node that stages the volume can see (a read-only remount, a detached
// device) is the node's answer (NodeGetVolumeStats).
func (s *ControllerService) ControllerGetVolumeHealth(ctx context.Context, req *csipb.ControllerGetVolumeHealthRequest) (*csipb.ControllerGetVolumeHealthResponse, error) {
	st, vol, err := s.storedVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csipb.ControllerGetVolumeHealthResponse{VolumeHealth: &csipb.VolumeHealth{
		VolumeId: vol.ID, HealthStatuses: st.health(vol.ID),
	}}, nil
}

// ControllerListVolumeHealth lists the volumes with an adverse condition
// (spec: healthy ones SHOULD be omitted), paged like ListVolumes.
func (s *ControllerService) ControllerListVolumeHealth(ctx context.Context, req *csipb.ControllerListVolumeHealthRequest) (*csipb.ControllerListVolumeHealthResponse, error) {
	// Healthy volumes are omitted, so a page holds only unhealthy ones.
	health := map[string][]*csipb.VolumeHealth_VolumeHealthEntry{}
	unhealthy := func(v volume.Volume) bool {
		if st, err := s.stores.volume(v.ID); err == nil {
			health[v.ID] = st.health(v.ID)
		}
		return len(health[v.ID]) > 0
	}
	vols, next, err := paginate(volumePage(req.GetStartingToken(), req.GetMaxEntries()), s.listVolumes(), volumeID, unhealthy)
	if err != nil {
		return nil, err
	}
	resp := &csipb.ControllerListVolumeHealthResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csipb.VolumeHealth{VolumeId: v.ID, HealthStatuses: health[v.ID]})
	}
	return resp, nil
}

// health is what the store says of a volume: its data must be there.
func (st *poolStore) health(id string) []*csipb.VolumeHealth_VolumeHealthEntry {
	out := answer.NotedHealth(st.VolumeStore, id)
	if !st.ImageLost(id) {
		return out
	}
	return append(out, answer.HealthEntry(csipb.VolumeHealthErrorType_DATA_LOSS, volume.ReasonImageMissing,
		"the image file of volume "+id+" is missing from pool "+st.Dir()))
}
