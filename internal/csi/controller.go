package csi

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/volume"
)

// ControllerService implements the CSI Controller service. It decides from
// the pools alone — their volume records, the nodes' in-use records — and
// asks the node that has a volume mounted to freeze it, through the pool
// too: it needs nothing of its own host's kernel, so it may run in another
// process, on another host, than every node. Each call goes to the store
// of the pool and kind its volume ID names (stores: routes.go, store.go).
type ControllerService struct {
	csipb.UnimplementedControllerServer
	cfg    Config
	stores routes[*poolStore]
	locks  *inflight
	// silentAfter, when set, replaces the wait for a node's record
	// before its client is taken for silent (controller_silent.go).
	silentAfter time.Duration
}

// CreateVolume makes a sparse (or thick) image and its record. It is
// idempotent by name (spec: same name and compatible request → same volume;
// incompatible → ALREADY_EXISTS).
func (s *ControllerService) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	name := req.GetName()
	if err := checkName("volume", name); err != nil {
		return nil, err
	}
	p, err := parseParameters(req.GetParameters())
	if err != nil {
		return nil, err
	}
	st, err := s.createStore(p, req.GetParameters())
	if err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities(), &p, st.Traits(), s.cfg.Shared); err != nil {
		return nil, err
	}
	if err := checkEncryptedAccess(req.GetVolumeCapabilities(), p); err != nil {
		return nil, err
	}
	// A VolumeAttributesClass given at create overrides the StorageClass's
	// limits and provisioning; it may set nothing else (parseMutable).
	m, err := parseMutable(p.qos, req.GetMutableParameters())
	if err != nil {
		return nil, err
	}
	p.qos = m.QoS
	if m.Provisioning != "" {
		p.provisioning = m.Provisioning
	}
	if err := s.checkAccessible(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return s.createFromSource(ctx, st, req, p) // controller_clone.go
	}
	size, err := volumeSize(req.GetCapacityRange(), minSize(p))
	if err != nil {
		return nil, err
	}

	id := st.VolumeID(name)
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	// A retry finds its volume in the index and checks it against the
	// record on disk. A new name costs no disk lookup: a volume that
	// another process sharing the pool made meanwhile is caught by the
	// create's exclusive commit (ErrAlreadyExists) and checked then.
	if st.Known(id) {
		if resp, err := s.existing(st, name, req, p); resp != nil || err != nil {
			return resp, err
		}
	}
	vol, err := st.Create(ctx, volume.CreateRequest{
		Name: name, CapacityBytes: size, RequestedBytes: requested(req.GetCapacityRange()), FSType: p.fsType,
		Provisioning: p.provisioning, Parameters: req.GetParameters(), QoS: &p.qos, Secrets: req.GetSecrets(),
		Encryption: p.encryption,
	})
	if errors.Is(err, volume.ErrAlreadyExists) {
		if resp, gerr := s.existing(st, name, req, p); resp != nil || gerr != nil {
			return resp, gerr
		}
	}
	if err != nil {
		return nil, err
	}
	klog.InfoS("volume created", "volumeID", vol.ID, "name", name, "bytes", size, "fsType", p.fsType, "provisioning", p.provisioning)
	return &csipb.CreateVolumeResponse{Volume: s.csiVolume(vol)}, nil
}

// existing answers a create whose name has a record on disk: that volume
// if compatible, ALREADY_EXISTS if not. Both nil when there is none.
func (s *ControllerService) existing(st *poolStore, name string, req *csipb.CreateVolumeRequest, p createParams) (*csipb.CreateVolumeResponse, error) {
	vol, err := st.GetByName(name)
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if err := compatible(vol, name, req, p); err != nil {
		return nil, err
	}
	return &csipb.CreateVolumeResponse{Volume: s.csiVolume(vol)}, nil
}

// compatible decides whether an existing volume answers a retried create.
func compatible(vol volume.Volume, name string, req *csipb.CreateVolumeRequest, p createParams) error {
	cr := req.GetCapacityRange()
	switch {
	case vol.Name != name:
		return alreadyExists("volume ID %s is taken by volume %q", vol.ID, vol.Name)
	case vol.CapacityBytes < cr.GetRequiredBytes(),
		cr.GetLimitBytes() > 0 && vol.CapacityBytes > cr.GetLimitBytes():
		return alreadyExists("volume %q already exists with %d bytes, outside the requested range [%d, %d]",
			name, vol.CapacityBytes, cr.GetRequiredBytes(), cr.GetLimitBytes())
	case vol.FSType != p.fsType:
		return alreadyExists("volume %q already exists with filesystem %s, not %s", name, vol.FSType, p.fsType)
	case !maps.Equal(vol.Parameters, req.GetParameters()):
		return alreadyExists("volume %q already exists with parameters %v, not %v", name, vol.Parameters, req.GetParameters())
	case !sameContentSource(vol.ContentSource, req.GetVolumeContentSource()):
		return alreadyExists("volume %q already exists with another content source", name)
	}
	return nil
}

// checkAccessible refuses requisite topologies that exclude this node: a
// volume can only live in this node's pool.
func (s *ControllerService) checkAccessible(tr *csipb.TopologyRequirement) error {
	req := tr.GetRequisite()
	if len(req) == 0 {
		return nil
	}
	key, value := s.cfg.topologySegment()
	for _, t := range req {
		if t.GetSegments()[key] == value {
			return nil
		}
	}
	if s.cfg.Shared {
		return resourceExhausted("cannot provision in pool %q: the requisite topologies %s exclude it (%s=%s)",
			value, describeTopologies(req), key, value)
	}
	return resourceExhausted("cannot provision on node %q: the requisite topologies %s exclude it, and filevol volumes live in the pool of the node that creates them",
		s.cfg.NodeID, describeTopologies(req))
}

func (s *ControllerService) csiVolume(v volume.Volume) *csipb.Volume {
	return &csipb.Volume{
		VolumeId:           v.ID,
		CapacityBytes:      v.CapacityBytes,
		VolumeContext:      v.Context,
		AccessibleTopology: []*csipb.Topology{s.cfg.topology()},
		ContentSource:      csiContentSource(v.ContentSource),
	}
}

// DeleteVolume removes the image and record. A missing volume is success;
// a volume that a node recorded as staged is FAILED_PRECONDITION, naming
// the nodes and staging paths.
func (s *ControllerService) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	st, err := s.stores.volume(id)
	if err != nil {
		// No volume here can have this ID (malformed, or of a pool or kind
		// this controller does not serve): nothing to delete (spec: MUST
		// succeed).
		klog.V(2).InfoS("no volume to delete", "volumeID", truncate(id), "reason", err)
		return &csipb.DeleteVolumeResponse{}, nil
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	staged, err := st.inuse.Of(id)
	if err != nil {
		return nil, err
	}
	if len(staged) > 0 {
		return nil, failedPrecondition("volume %s is still in use: %s; unpublish and unstage it first", id, describeInUse(staged))
	}
	del := func(attached attach.Record) error {
		if n := attached.Nodes(); len(n) > 0 {
			return failedPrecondition("volume %s is still attached to node %s; detach it first (ControllerUnpublishVolume, or delete its VolumeAttachment)", id, strings.Join(n, ", "))
		}
		return st.Delete(ctx, id)
	}
	if !s.cfg.Shared {
		err = del(attach.Record{VolumeID: id})
	} else {
		// The check that no node has it attached, the delete, and the
		// removal of its attachment record are one step under the
		// volume's attachment lock, which every controller replica takes:
		// a ControllerPublishVolume in another replica during a leader
		// hand-over waits, then finds the volume gone.
		err = st.attach.Retire(id, del)
	}
	if err != nil {
		return nil, err
	}
	klog.InfoS("volume deleted", "volumeID", id)
	return &csipb.DeleteVolumeResponse{}, nil
}

// ControllerGetCapabilities lists what this controller does. Publish is
// among them only for a shared pool: node-local volumes need no attach step
// (CSIDriver attachRequired: false), shared ones are attached to one node
// at a time (controller_publish.go).
func (s *ControllerService) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	caps := controllerCaps(
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
		csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		// Snapshots, restores, clones and expansion.
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csipb.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csipb.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		// I/O limits changed in place (controller_modify.go).
		csipb.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	)
	if s.cfg.Shared {
		caps = append(caps, controllerCaps(
			csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		)...)
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func controllerCaps(types ...csipb.ControllerServiceCapability_RPC_Type) []*csipb.ControllerServiceCapability {
	out := make([]*csipb.ControllerServiceCapability, 0, len(types))
	for _, t := range types {
		out = append(out, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return out
}
