package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/filevol/filevol/internal/volume"
	"k8s.io/klog/v2"
)

// NodePublishVolume has the backend make the staged volume available at
// the target (for an image: a bind of the staged filesystem, or of the
// loop device node for block volumes), read-only when the request or the
// access mode says so.
func (s *NodeService) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id, target, staging, c := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath(), req.GetVolumeCapability()
	nv, _, unlock, err := s.begin(id, c, true, checked("target path", &target), checked("staging target path", &staging))
	if err != nil {
		return nil, err
	}
	defer unlock()
	vol, err := nv.Get(id)
	if err != nil {
		return nil, err
	}
	r := volume.PublishRequest{StagingPath: staging, TargetPath: target, Block: c.GetBlock() != nil,
		MountFlags: c.GetMount().GetMountFlags(), ReadOnly: req.GetReadonly() || readerOnly(c),
		SingleWriter: c.GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		Secrets:      req.GetSecrets()}
	if err := nv.Publish(ctx, vol, r); err != nil {
		return nil, err
	}
	s.applyPublished(nv, vol, req.GetVolumeContext()[podUIDContextKey], target)
	klog.InfoS("volume published", "volumeID", id, "target", target, "readOnly", r.ReadOnly)
	return &csipb.NodePublishVolumeResponse{}, nil
}

// podUIDContextKey is the pod's UID in the volume context, which kubelet
// adds when the CSIDriver sets podInfoOnMount.
const podUIDContextKey = "csi.storage.k8s.io/pod.uid"

// NodeUnpublishVolume has the backend undo the publish and remove the
// target (spec: the SP MUST delete what it created). Idempotent; a volume
// whose record is gone is unpublished all the same.
func (s *NodeService) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	nv, _, unlock, err := s.begin(id, nil, false, checked("target path", &target))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.unpublishing(nv, id, target, func() error { return nv.Unpublish(ctx, id, target) }); err != nil {
		return nil, err
	}
	klog.InfoS("volume unpublished", "volumeID", id, "target", target)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}
