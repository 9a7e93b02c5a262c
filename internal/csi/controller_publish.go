package csi

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/volume"
)

// The publish_context that ControllerPublishVolume returns and
// NodeStageVolume checks: the node the attachment is for, and the
// attachment's epoch (internal/attach), which no later attachment reuses.
const (
	publishNodeKey  = "filevol.csi.io/node"
	publishEpochKey = "filevol.csi.io/attach-epoch"
)

// ControllerPublishVolume attaches a volume of a shared pool to a node:
// the attachment is recorded durably in the pool (internal/attach), where
// the node's NodeStageVolume checks it, and where every controller replica
// reads the same answer after a leader hand-over. A single-node volume
// attached to another node is FAILED_PRECONDITION naming that node
// (Kubernetes shows a Multi-Attach error); one whose image another node's
// loop device still holds is refused too, for as long as it does (the
// fencing of a force-detached node, docs/shared-pools.md). Idempotent.
func (s *ControllerService) ControllerPublishVolume(ctx context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	id, node, c := req.GetVolumeId(), req.GetNodeId(), req.GetVolumeCapability()
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	if node == "" {
		return nil, invalidArgument("node ID is missing")
	}
	if _, err := checkCapability(c); err != nil {
		return nil, err
	}
	st, err := s.stores.volume(id)
	if err != nil {
		return nil, err
	}
	if multiNode(c) && !st.Traits().MultiNode {
		return nil, errImageSingleNode(c)
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	vol, err := st.Get(id)
	if err != nil {
		return nil, err
	}
	if !s.cfg.Shared {
		return nil, failedPrecondition("volume %s is in a node-local pool: it is never attached (its CSIDriver has attachRequired: false)", id)
	}
	if !st.KnownNode(node) {
		return nil, notFound("node %s has never opened pool %s: it does not mount the pool, or is not a filevol node", node, st.Dir())
	}
	// Only a multi-node kind's volume is published MULTI_NODE_* (checked above,
	// and at create: checkMultiNodeCapabilities).
	areq := attach.Request{VolumeID: vol.ID, Node: node, ReadOnly: req.GetReadonly() || readerOnly(c), SingleNode: !multiNode(c),
		Client: s.notedClient(st, node)}
	if err := s.fence(ctx, st, areq, req.GetSecrets()); err != nil {
		return nil, err
	}
	if err := s.checkAttachLimit(st, areq); err != nil {
		return nil, err
	}
	// Under the attachment lock, the volume must still exist: a
	// DeleteVolume in another controller replica (a leader hand-over)
	// checks and deletes under the same lock.
	a, err := st.attach.Attach(areq, func() error { _, err := st.Get(id); return err })
	if err != nil {
		var e *attach.ElsewhereError
		if errors.As(err, &e) {
			return nil, failedPrecondition("volume %s is attached to node %s since %s (single-node access); detach it there first: delete the pod that uses it on %s",
				id, e.Node, e.Since.Format("2006-01-02T15:04:05Z07:00"), e.Node)
		}
		return nil, err
	}
	klog.InfoS("volume attached", "volumeID", id, "node", node, "epoch", a.Epoch, "readOnly", a.ReadOnly)
	if s.cfg.SharedUnsafe != "" {
		klog.Warningf("volume %s attached to node %s on a shared pool whose filesystem lacks what fencing and coherence need, allowed by --shared-pool-unsafe-allow: %s",
			id, node, s.cfg.SharedUnsafe)
	}
	return &csipb.ControllerPublishVolumeResponse{PublishContext: map[string]string{
		publishNodeKey:  node,
		publishEpochKey: strconv.FormatUint(a.Epoch, 10),
	}}, nil
}

// fence refuses a new writer's attachment while a loop device, on any node
// that mounts the pool, still holds the image's lock (loop.Options.Lock):
// a node that was force-detached but whose kernel still has the device,
// because the node is cut off from the API server or its filevol died,
// could still write. A node already attached is not asked again. Given
// the cluster's credentials in secrets, a kind that can fences the
// force-detached holder first (controller_evict.go).
func (s *ControllerService) fence(ctx context.Context, st *poolStore, req attach.Request, secrets volume.Secrets) error {
	rec, err := st.attach.Of(req.VolumeID)
	if err != nil {
		return err
	}
	if _, ok := rec.Find(req.Node); ok || len(rec.Attachments) > 0 {
		return nil // idempotent, or refused by Attach naming the holder
	}
	image, ok := st.VolumeStore.(imagePather)
	if !ok {
		return nil
	}
	// Before the lock is asked: on CephFS the question waits for a dead
	// holder's client (controller_evict.go).
	hint, silent := "", false
	if d := rec.LastDetach; d != nil && d.Node != req.Node {
		if hint, silent, err = s.fenceGone(ctx, st, "ControllerPublishVolume", req.VolumeID, d.Node, d.Client, secrets); err != nil {
			return err
		}
	}
	held, err := loop.Locked(image.ImagePath(req.VolumeID))
	if err != nil || !held {
		return err
	}
	last, holder := "another node", ""
	if d := rec.LastDetach; d != nil {
		if d.Node == req.Node {
			return nil // this node's own device, left from its last attachment
		}
		last = fmt.Sprintf("node %s (detached at %s)", d.Node, d.At.Format("2006-01-02T15:04:05Z07:00"))
		holder = d.Node
	}
	if hint != "" {
		hint = "; " + hint
	}
	detail := ""
	if !silent { // a silent node's records wait for its client
		detail = fenceDetail(st, req.VolumeID, holder, req.Node)
	}
	// What the holder recorded of its device (controller_fence.go).
	return fmt.Errorf("%w: %s still holds the image of volume %s open for writing through its loop device, so it could still write to it; "+
		"it lets go when filevol on that node unstages the volume, when the node's loop device is detached, or when the node's client is cut off from the pool's storage%s",
		loop.ErrLocked, last, req.VolumeID, detail+hint)
}

// checkAttachLimit refuses a new attachment beyond --max-volumes-per-node
// on the node (RESOURCE_EXHAUSTED, CSI), counted from the pool's records.
// The controller is given the same limit as the nodes.
func (s *ControllerService) checkAttachLimit(st *poolStore, req attach.Request) error {
	if s.cfg.MaxVolumesPerNode <= 0 {
		return nil
	}
	rec, err := st.attach.Of(req.VolumeID)
	if err != nil {
		return err
	}
	if _, ok := rec.Find(req.Node); ok {
		return nil // idempotent: already counted
	}
	on, err := st.attach.OfNode(req.Node)
	if err != nil {
		return err
	}
	if int64(len(on)) >= s.cfg.MaxVolumesPerNode {
		return resourceExhausted("node %s has %d volumes attached, its limit (--max-volumes-per-node %d); detach one first",
			req.Node, len(on), s.cfg.MaxVolumesPerNode)
	}
	return nil
}

// imagePather is a store whose volumes are image files (fencing locks them).
type imagePather interface{ ImagePath(id string) string }

// ControllerUnpublishVolume detaches a volume from a node (from every node
// when the node ID is empty). A volume or node that no longer exists is
// detached already (CSI spec). It is what Kubernetes' force-detach calls
// for a node that is gone: the record is dropped at once, and fencing, not
// this call, keeps the old node's device from the image; given the
// cluster's credentials, a kind that can cuts that node's client off the
// storage first (controller_evict.go).
func (s *ControllerService) ControllerUnpublishVolume(ctx context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	st, err := s.stores.volume(id)
	if errors.Is(err, volume.ErrNotFound) {
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := st.attach.Of(id)
	if err != nil {
		return nil, err
	}
	nodes := []string{node}
	if node == "" {
		nodes = rec.Nodes()
	}
	for _, n := range nodes {
		// Before the record changes: on CephFS the write waits for a
		// dead node's client (controller_evict.go).
		a, _ := rec.Find(n)
		hint, _, err := s.fenceGone(ctx, st, "ControllerUnpublishVolume", id, n, a.Client, req.GetSecrets())
		if err != nil {
			return nil, err
		}
		if hint != "" {
			klog.InfoS("force-detach of a node that still stages the volume, without the cluster's credentials: this detach, and the next attach, wait until the filesystem gives up on that node's client (about 65 s on CephFS) if the node is gone; "+hint,
				"volumeID", id, "node", n)
		}
		if err := st.attach.Detach(id, n); err != nil {
			return nil, err
		}
		klog.InfoS("volume detached", "volumeID", id, "node", n)
	}
	return &csipb.ControllerUnpublishVolumeResponse{}, nil
}
