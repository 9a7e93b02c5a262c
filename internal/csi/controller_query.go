package csi

import (
	"context"
	"maps"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ValidateVolumeCapabilities confirms the capabilities filevol can honour
// for an existing volume, or says in Message why not.
func (s *ControllerService) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, invalidArgument("volume capabilities are missing")
	}
	st, vol, err := s.storedVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	unconfirmed := func(msg string) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: msg}, nil
	}
	for _, c := range req.GetVolumeCapabilities() {
		if multiNode(c) && (!s.cfg.Shared || !st.Traits().MultiNode) {
			if !st.Traits().MultiNode {
				return unconfirmed(errImageSingleNode(c).Error())
			}
			return unconfirmed("access mode " + c.GetAccessMode().GetMode().String() + ": volume " + vol.ID + " is in a node-local directory pool")
		}
		fsType, err := checkCapability(c)
		if err != nil {
			return unconfirmed(err.Error())
		}
		if fsType != "" && fsType != vol.FSType {
			return unconfirmed("volume " + vol.ID + " is formatted as " + vol.FSType + ", not " + fsType)
		}
	}
	if params := req.GetParameters(); len(params) > 0 && !maps.Equal(params, vol.Parameters) {
		return unconfirmed("parameters differ from those the volume was created with")
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// ListVolumes pages through the pools' volumes in ID order. The token is the last ID
// of the previous page, so deleting volumes between pages never breaks it.
func (s *ControllerService) ListVolumes(ctx context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	vols, next, err := paginate(volumePage(req.GetStartingToken(), req.GetMaxEntries()), s.listVolumes(), volumeID, nil)
	if err != nil {
		return nil, err
	}
	staged, err := s.allInUse()
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListVolumesResponse{NextToken: next, Entries: make([]*csipb.ListVolumesResponse_Entry, 0, len(vols))}
	for _, v := range vols {
		st, err := s.stores.volume(v.ID)
		if err != nil {
			return nil, err
		}
		published, err := s.publishedOf(st, v.ID, staged[v.ID])
		if err != nil {
			return nil, err
		}
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{
			Volume: s.csiVolume(v),
			Status: &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: published},
		})
	}
	return resp, nil
}

// ControllerGetVolume returns one volume with its status.
func (s *ControllerService) ControllerGetVolume(ctx context.Context, req *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	st, vol, err := s.storedVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	staged, err := st.inuse.Of(vol.ID)
	if err != nil {
		return nil, err
	}
	published, err := s.publishedOf(st, vol.ID, staged)
	if err != nil {
		return nil, err
	}
	return &csipb.ControllerGetVolumeResponse{
		Volume: s.csiVolume(vol),
		Status: &csipb.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: published},
	}, nil
}

// GetCapacity says what the pool that CreateVolume would use can still
// promise for volumes matching the request: 0 for capabilities or
// topologies this node cannot serve.
func (s *ControllerService) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	params := withoutSecretRefs(req.GetParameters())
	p, err := parseParameters(params)
	if err != nil {
		return nil, err
	}
	for _, c := range req.GetVolumeCapabilities() {
		if _, err := checkCapability(c); err != nil {
			return &csipb.GetCapacityResponse{}, nil
		}
	}
	if key, value := s.cfg.topologySegment(); req.GetAccessibleTopology() != nil && req.GetAccessibleTopology().GetSegments()[key] != value {
		return &csipb.GetCapacityResponse{}, nil
	}
	st, err := s.createStore(p, params)
	if err != nil {
		return nil, err
	}
	c, err := st.Capacity()
	if err != nil {
		return nil, err
	}
	avail := c.AvailableBytes / allocationUnit * allocationUnit
	minimum := int64(allocationUnit)
	if p.fsType != "" {
		minimum = max(minimum, minSize(p))
	}
	if avail < minimum {
		avail = 0
	}
	return &csipb.GetCapacityResponse{
		AvailableCapacity: avail,
		MaximumVolumeSize: wrapperspb.Int64(avail),
		MinimumVolumeSize: wrapperspb.Int64(minimum),
	}, nil
}

// withoutSecretRefs is params without the keys by which a StorageClass
// names the Secrets of each call (csi.storage.k8s.io/<call>-secret-name
// and -namespace). The sidecars resolve those and pass the Secrets in the
// request's secrets; csi-provisioner removes the keys from CreateVolume's
// parameters, but its capacity tracking sends a class's parameters as they
// are to GetCapacity, where refusing them would leave every claim of an
// encrypted class unschedulable (no CSIStorageCapacity, ever).
func withoutSecretRefs(params map[string]string) map[string]string {
	out := make(map[string]string, len(params))
	for k, v := range params {
		if rest, ok := strings.CutPrefix(k, kubernetesMetaPrefix); ok &&
			(strings.HasSuffix(rest, "-secret-name") || strings.HasSuffix(rest, "-secret-namespace")) {
			continue
		}
		out[k] = v
	}
	return out
}
