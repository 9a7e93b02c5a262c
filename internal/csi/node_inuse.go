package csi

import (
	"errors"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volume"
)

// recordStaged records, in the volume's pool, that this node stages it.
func (s *NodeService) recordStaged(nv *nodeVolumes, e inuse.Entry) error {
	e.Node = s.cfg.NodeID
	return nv.inuse.Put(e)
}

// dropStagedIfUnused drops this node's record of the volume when its
// backend shows nothing of it here: a stage that failed and undid its
// work. What some earlier stage made keeps the record.
func (s *NodeService) dropStagedIfUnused(nv *nodeVolumes, id string) {
	used, err := nv.InUse(id)
	if err != nil || used {
		return
	}
	if err := nv.inuse.Remove(id, s.cfg.NodeID); err != nil {
		klog.ErrorS(err, "drop the in-use record of a volume no longer staged", "volumeID", id)
	}
}

// ReconcileInUse makes this node's in-use records say what the kernel
// shows, pool by pool: a record whose volume has nothing here goes (a
// crash between the record and the attach, or between the detach and the
// drop; a reboot), and a volume that a backend finds staged (stagedFinder)
// but no record names gets one (volumes staged by a filevol that kept no
// records). It touches only this node's records. Each volume is handled
// under its lock, so it never races a stage or an unstage.
func (s *NodeService) ReconcileInUse() {
	for _, nv := range s.vols.all {
		s.reconcile(nv, false, nil)
	}
}

// reconcileBeforeServing is ReconcileInUse at start, before any call can
// be in flight: one listing of the kernel is then the whole truth.
func (s *NodeService) reconcileBeforeServing() {
	for _, nv := range s.vols.all {
		s.reconcile(nv, true, nil)
	}
}

// reconcile is ReconcileInUse for one pool. beforeServing says no call
// can have staged anything since the listing of the attached volumes.
// listing, when not nil, is a listing of the loop devices the caller (the
// sweep) made moments ago; it is used for this node's image pool instead
// of listing again. It only says which records stay without a look-up of
// their own: a device detached since keeps its volume's record until the
// next sweep (a delete waits; nothing is lost), and every record dropped
// or added is decided under the volume's lock from the kernel as it is
// then (dropStagedIfUnused, StagedEntry).
func (s *NodeService) reconcile(nv *nodeVolumes, beforeServing bool, listing []loop.Device) {
	mine, err := nv.inuse.OfNode(s.cfg.NodeID)
	if err != nil {
		klog.ErrorS(err, "read this node's in-use records", "pool", nv.Dir())
		return
	}
	// The volumes attached now, from one listing of the loop devices: a
	// record whose volume is among them is in use and stays, without a
	// look-up of its own (a look-up per record scanned every loop device of
	// the node once per record: a second per sweep at 1,000 volumes).
	f, finder := nv.NodeBackend.(stagedFinder)
	var ids []string
	if b, ok := nv.NodeBackend.(listingFinder); ok && listing != nil && !beforeServing {
		ids = b.AttachedIn(listing)
	} else if finder {
		if ids, err = f.Attached(); err != nil {
			klog.ErrorS(err, "find the volumes attached here to reconcile in-use records", "pool", nv.Dir())
			return
		}
	}
	attached := make(map[string]bool, len(ids))
	for _, id := range ids {
		attached[id] = true
	}
	for id := range mine {
		// A pool may hold volumes of several kinds: each record is its
		// own backend's to check.
		r, err := s.vols.volume(id)
		switch {
		case err != nil || r != nv || attached[id]:
		case beforeServing && finder:
			// The listing is the truth: a look-up per record scanned every
			// loop device once more, and after a reboot 1,000 records kept
			// the driver from serving for over 20 s.
			if err := nv.inuse.Remove(id, s.cfg.NodeID); err != nil {
				klog.ErrorS(err, "drop the in-use record of a volume no longer staged", "volumeID", id)
			}
		default:
			s.withLock(id, func() { s.dropStagedIfUnused(nv, id) })
		}
	}
	for _, id := range ids {
		if mine[id] != nil {
			continue
		}
		s.withLock(id, func() {
			e, staged, err := f.StagedEntry(id)
			if err != nil || !staged {
				return // unused devices are the garbage collector's
			}
			if err := s.recordStaged(nv, e); err != nil {
				klog.ErrorS(err, "record a volume found staged", "volumeID", id)
				return
			}
			klog.InfoS("recorded a volume found staged without a record", "volumeID", id, "at", e.StagingPath, "block", e.Block)
		})
	}
	s.noteDevices(nv, mine, listing, !beforeServing) // node_devices.go
}

// deletedMeanwhile turns err into NOT_FOUND when the volume's record is
// gone: a DeleteVolume (another process: the controller and the node
// share no lock) removed it while this node staged it.
func (s *NodeService) deletedMeanwhile(nv *nodeVolumes, id string, err error) error {
	if _, gerr := nv.Get(id); errors.Is(gerr, volume.ErrNotFound) {
		return notFound("volume %s does not exist (deleted while it was being staged)", id)
	}
	return err
}
