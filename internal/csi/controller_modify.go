package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"
)

// ControllerModifyVolume changes a volume's I/O limits and provisioning in
// place: the external-resizer calls it when a claim's
// volumeAttributesClassName changes, with the new class's parameters.
// Only those are mutable (parseMutable): any other parameter is
// INVALID_ARGUMENT naming it, and nothing is changed. Thin to thick
// reserves the image's space first: RESOURCE_EXHAUSTED, with nothing
// changed, when the pool lacks it (pool.Modify). The new limits are written to the volume's record,
// atomically; the node that has the volume published reads the record
// on its next reconcile (Config.QoSResync, one second by default) and
// applies them to the cgroup of every pod using it (qos.go), without a
// restart. Idempotent: the same limits again change nothing.
func (s *ControllerService) ControllerModifyVolume(ctx context.Context, req *csipb.ControllerModifyVolumeRequest) (*csipb.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	// Parsed once against nothing, so a bad parameter is refused before
	// the volume is looked up or locked.
	if _, err := parseMutable(zeroQoS, req.GetMutableParameters()); err != nil {
		return nil, err
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, vol, err := s.storedVolume(id)
	if err != nil {
		return nil, err
	}
	m, err := parseMutable(vol.Limits(), req.GetMutableParameters())
	if err != nil {
		return nil, err
	}
	if m.QoS == vol.Limits() && (m.Provisioning == "" || m.Provisioning == vol.Provisioning) {
		return &csipb.ControllerModifyVolumeResponse{}, nil
	}
	mod, err := st.Modify(ctx, id, m)
	if err != nil {
		return nil, err
	}
	klog.InfoS("volume modified", "volumeID", id, "fromLimits", vol.Limits(), "toLimits", mod.Limits(),
		"fromProvisioning", vol.Provisioning, "toProvisioning", mod.Provisioning)
	return &csipb.ControllerModifyVolumeResponse{}, nil
}
