package csi

import (
	"errors"

	"github.com/filevol/filevol/internal/pool"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volview"
)

// recordStaged records, in the pool, that this node stages the volume.
func (s *NodeService) recordStaged(id, staging string, block, readOnly bool) error {
	return s.inuse.Put(inuse.Entry{VolumeID: id, Node: s.cfg.NodeID, StagingPath: staging, Block: block, ReadOnly: readOnly})
}

// dropStagedIfUnused drops this node's record of the volume when the
// kernel shows no device of it: a stage that failed and undid its attach.
// A device some earlier stage attached keeps the record.
func (s *NodeService) dropStagedIfUnused(id string) {
	devs, err := s.host.Loops.Find(s.pool.ImagePath(id))
	if err != nil || len(devs) > 0 {
		return
	}
	if err := s.inuse.Remove(id, s.cfg.NodeID); err != nil {
		klog.ErrorS(err, "drop the in-use record of a volume no longer staged", "volumeID", id)
	}
}

// ReconcileInUse makes this node's in-use records say what the kernel
// shows: a record whose volume has no device here goes (a crash between
// the record and the attach, or between the detach and the drop; a
// reboot), and a device of a pool image that some mount or bind uses but
// no record names gets one (volumes staged by a filevol that kept no
// records). It touches only this node's records. Each volume is handled
// under its lock, so it never races a stage or an unstage.
func (s *NodeService) ReconcileInUse() {
	mine, err := s.inuse.OfNode(s.cfg.NodeID)
	if err != nil {
		klog.ErrorS(err, "read this node's in-use records")
		return
	}
	for id := range mine {
		s.withLock(id, func() { s.dropStagedIfUnused(id) })
	}
	devs, err := s.host.Loops.List()
	if err != nil {
		klog.ErrorS(err, "list loop devices to reconcile in-use records")
		return
	}
	for _, d := range devs {
		id, ok := volview.VolumeID(s.pool.VolumesDir(), d.BackingFile)
		if !ok || mine[id] != nil {
			continue
		}
		s.withLock(id, func() {
			u, err := volumeUsage(s.host, s.pool.ImagePath(id))
			if err != nil || len(u.Uses) == 0 {
				return // unused devices are the garbage collector's
			}
			fsMounts, binds := u.FS(), u.Binds()
			staging, block := "", len(fsMounts) == 0
			switch {
			case !block:
				staging = fsMounts[0].MountPoint
			default:
				staging = filepath.Dir(binds[0].MountPoint)
			}
			if err := s.recordStaged(id, staging, block, d.ReadOnly); err != nil {
				klog.ErrorS(err, "record a volume found staged", "volumeID", id)
				return
			}
			klog.InfoS("recorded a volume found staged without a record", "volumeID", id, "device", d.Path, "at", staging)
		})
	}
}

// deletedMeanwhile turns err into NOT_FOUND when the volume's record is
// gone: a DeleteVolume (another process: the controller and the node
// share no lock) removed it while this node staged it. With err nil it
// says only that: nil when the volume still exists.
func (s *NodeService) deletedMeanwhile(id string, err error) error {
	if _, gerr := s.pool.Get(id); errors.Is(gerr, pool.ErrNotFound) {
		return notFound("volume %s does not exist (deleted while it was being staged)", id)
	}
	return err
}
