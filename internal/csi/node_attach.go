package csi

import (
	"errors"
	"strconv"

	"github.com/filevol/filevol/internal/attach"
)

// checkAttached is NodeStageVolume's check, on a shared pool, that the
// controller attached the volume to this node and still does: the
// publish_context names this node and an attachment epoch that the pool's
// record holds. A node that was force-detached and comes back with its old
// context is refused, even if it was attached again meanwhile under a new
// epoch (kubelet then gets the new context and retries).
func (s *NodeService) checkAttached(nv *nodeVolumes, id string, publishContext map[string]string) error {
	if !s.cfg.Shared {
		return nil
	}
	if _, err := nv.Get(id); err != nil {
		return err // a volume that does not exist is NOT_FOUND first
	}
	node, epochText := publishContext[publishNodeKey], publishContext[publishEpochKey]
	if node == "" || epochText == "" {
		return failedPrecondition("volume %s is in a shared pool: ControllerPublishVolume must attach it to node %s first, and NodeStageVolume carries no attachment in its publish_context (is the CSIDriver's attachRequired true?)",
			id, s.cfg.NodeID)
	}
	if node != s.cfg.NodeID {
		return failedPrecondition("the publish_context of volume %s is for node %s, not this node %s", id, node, s.cfg.NodeID)
	}
	epoch, err := strconv.ParseUint(epochText, 10, 64)
	if err != nil {
		return invalidArgument("publish_context %s=%q of volume %s is not an attachment epoch", publishEpochKey, epochText, id)
	}
	err = attach.New(nv.Dir()).Check(id, s.cfg.NodeID, epoch)
	if errors.Is(err, attach.ErrNotAttached) {
		return failedPrecondition("volume %s is not attached to this node under the publish_context's attachment: %v; the controller must attach it again", id, err)
	}
	return err
}
