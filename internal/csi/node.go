package csi

import (
	"context"
	"errors"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// NodeService implements the CSI Node service. It validates, locks,
// routes each call to the backend of the volume's pool and kind
// (NodeBackend: node_backend.go), keeps the in-use records and logs; the
// backends do the kernel's part. It holds no state of its own: a retried
// call, a restarted driver or a rebooted node are described by what the
// pool's records and the kernel show.
type NodeService struct {
	csipb.UnimplementedNodeServer
	cfg   Config
	vols  routes[*nodeVolumes]
	locks *inflight
	paths pathPolicy
	// pool and host are the node-local image pool and this node's kernel,
	// which the garbage collector (gc.go), the storage health and the
	// freeze agent look at.
	pool ImagePool
	host Host
	// qos enforces volumes' I/O limits (qos.go); nil when this node has
	// no cgroup hierarchy that throttles block I/O.
	qos *qosEnforcer
}

// nodeVolumes is one route of the node: the backend of a pool's volumes
// of one kind, and the pool's in-use records, where the node tells the
// controller which volumes it has staged (internal/inuse).
type nodeVolumes struct {
	NodeBackend
	inuse *inuse.Store
}

// serve routes the volumes of kind in the pool poolID to b.
func (s *NodeService) serve(poolID string, kind volid.Kind, b NodeBackend) {
	s.vols.add(poolID, kind, &nodeVolumes{NodeBackend: b, inuse: inuse.New(b.Dir())})
}

// NodeStageVolume records the stage, then has the backend make it (for an
// image: a loop device, a filesystem mounted at the staging path, or the
// device bound at <staging>/device).
func (s *NodeService) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	id, staging, c := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetVolumeCapability()
	nv, fsType, unlock, err := s.begin(id, c, true, checked("staging target path", &staging))
	if err != nil {
		return nil, err
	}
	defer unlock()
	r := volume.StageRequest{StagingPath: staging, Block: c.GetBlock() != nil, FSType: fsType,
		MountFlags: c.GetMount().GetMountFlags(), ReadOnly: readerOnly(c), Secrets: req.GetSecrets()}
	if err := s.checkAttached(nv, id, req.GetPublishContext()); err != nil {
		return nil, err
	}

	// Recorded first: the controller decides "in use" from these records,
	// so nothing of the volume is ever on this node unrecorded, and a
	// DeleteVolume that runs from now on refuses. One that ran before this
	// record and removes the volume meanwhile is caught below
	// (deletedMeanwhile) or by the backend.
	had, err := nv.inuse.Has(id, s.cfg.NodeID)
	r.Unrecorded = err == nil && !had
	rec := inuse.Entry{VolumeID: id, StagingPath: staging, Block: r.Block, ReadOnly: r.ReadOnly}
	s.keepDevice(nv, &rec, had) // node_devices.go
	s.recordClient(nv, &rec)
	if err := s.recordStaged(nv, rec); err != nil {
		return nil, err
	}
	vol, err := nv.Get(id)
	var source string
	if err == nil {
		source, err = nv.Stage(ctx, vol, r)
	}
	if errors.Is(err, volume.ErrNotFound) {
		// No such volume: nothing of it can be staged here.
		_ = nv.inuse.Remove(id, s.cfg.NodeID)
		return nil, err
	}
	if err != nil {
		// A backend leaves nothing of a failed stage behind; what an
		// earlier stage made keeps the record.
		s.dropStagedIfUnused(nv, id)
		return nil, s.deletedMeanwhile(nv, id, err)
	}
	s.recordDevice(nv, rec, source) // node_devices.go
	klog.InfoS("volume staged", "volumeID", id, "source", source, "stagingPath", staging, "block", r.Block)
	return &csipb.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume has the backend undo the stage (for an image: unmount
// the staging path, detach the loop devices), then drops the in-use
// record. It is idempotent; it refuses while the volume is still
// published somewhere (the CO must unpublish first).
func (s *NodeService) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	nv, _, unlock, err := s.begin(id, nil, false, checked("staging target path", &staging))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := nv.Unstage(ctx, id, staging); err != nil {
		return nil, err
	}
	// Dropped after the backend's work: a crash in between leaves a record
	// the node's reconcile or the retried unstage drops.
	if err := nv.inuse.Remove(id, s.cfg.NodeID); err != nil {
		return nil, err
	}
	klog.InfoS("volume unstaged", "volumeID", id, "stagingPath", staging)
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// multiNode reports whether the access mode allows several nodes.
func multiNode(c *csipb.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:
		return true
	}
	return false
}

// readerOnly reports whether the access mode allows no writer.
func readerOnly(c *csipb.VolumeCapability) bool {
	m := c.GetAccessMode().GetMode()
	return m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// nodeVolume routes id to the node half of its pool and kind and reads
// the volume's record.
func (s *NodeService) nodeVolume(id string) (*nodeVolumes, volume.Volume, error) {
	return routed(id, s.vols.volume, (*nodeVolumes).Get)
}
