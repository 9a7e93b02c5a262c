package csi

import (
	"context"
	"sort"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/pool"
)

// ControllerGetVolumeHealth reports the pool-side health of one volume; an
// empty status list means no adverse condition is known.
func (s *ControllerService) ControllerGetVolumeHealth(ctx context.Context, req *csipb.ControllerGetVolumeHealthRequest) (*csipb.ControllerGetVolumeHealthResponse, error) {
	if err := checkVolumeID(req.GetVolumeId()); err != nil {
		return nil, err
	}
	vol, err := s.pool.Get(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	devs, err := s.host.FindLoop(s.pool.ImagePath(vol.ID))
	if err != nil {
		return nil, err
	}
	return &csipb.ControllerGetVolumeHealthResponse{VolumeHealth: &csipb.VolumeHealth{
		VolumeId: vol.ID, HealthStatuses: imageHealth(s.pool, vol.ID, devs),
	}}, nil
}

// ControllerListVolumeHealth lists the volumes with an adverse condition
// (spec: healthy ones SHOULD be omitted), paged like ListVolumes.
func (s *ControllerService) ControllerListVolumeHealth(ctx context.Context, req *csipb.ControllerListVolumeHealthRequest) (*csipb.ControllerListVolumeHealthResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalidArgument("max_entries %d must not be negative", req.GetMaxEntries())
	}
	token := req.GetStartingToken()
	if token != "" && pool.ValidID(token) != nil {
		return nil, aborted("starting_token %q was not issued by filevol; restart the listing without a token", truncate(token))
	}
	attached, err := s.attachedImages()
	if err != nil {
		return nil, err
	}
	vols := s.pool.List()
	start := 0
	if token != "" {
		start = sort.Search(len(vols), func(i int) bool { return vols[i].ID > token })
	}
	resp := &csipb.ControllerListVolumeHealthResponse{}
	for _, v := range vols[start:] {
		st := imageHealth(s.pool, v.ID, attached[s.pool.ImagePath(v.ID)])
		if len(st) == 0 {
			continue
		}
		if n := int(req.GetMaxEntries()); n > 0 && len(resp.Entries) == n {
			resp.NextToken = resp.Entries[n-1].VolumeId
			break
		}
		resp.Entries = append(resp.Entries, &csipb.VolumeHealth{VolumeId: v.ID, HealthStatuses: st})
	}
	return resp, nil
}
