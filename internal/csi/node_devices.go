package csi

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
)

// On a shared pool the controller refuses another node's attach while
// this node's loop device still holds a volume's image (fencing,
// controller_publish.go), and cannot look at this node's kernel. So this
// node's in-use records say which device it staged the volume through
// (inuse.Entry.Device: at stage, or at the next reconcile for a record
// without it), and when that device's detach is pending because something
// still holds it open (an operator's losetup -d while a pod's mount or a
// process has it: the command exits 0, the device stays), what holds it
// (inuse.Entry.Pending), for the controller to say in its refusal. The
// node looks at every reconcile: at start, and at every sweep.

// deviceNoter is nv's kind as a deviceNoter, when this node serves a
// shared pool (only there does a controller fence by another node's
// device) and the kind stages through a loop device.
func (s *NodeService) deviceNoter(nv *nodeVolumes) (deviceNoter, bool) {
	n, ok := nv.NodeBackend.(deviceNoter)
	return n, ok && s.cfg.Shared
}

// keepDevice carries into e, the record a stage writes before it
// attaches, what this node's earlier record of the volume says of its
// device, on a shared pool: a stage retried while that device's detach is
// pending (which it refuses) must not erase what the controller is to
// say. Only a re-stage reads it (had: an earlier record exists).
func (s *NodeService) keepDevice(nv *nodeVolumes, e *inuse.Entry, had bool) {
	if _, ok := s.deviceNoter(nv); !ok || !had {
		return
	}
	if old, ok, err := nv.inuse.Get(e.VolumeID, s.cfg.NodeID); err == nil && ok {
		e.Device, e.Pending = old.Device, old.Pending
	}
}

// recordClient adds to e, the record a stage writes before it attaches,
// this node's client of the pool where its filesystem names one
// (Config.StorageClient), for a kind staged through a loop device: what a
// controller given the cluster's credentials evicts should this node be
// force-detached while its device holds the image. Read at every stage:
// a client mounted again has another identity. A failure is logged: the
// stage goes on, and the controller can then only wait for the
// filesystem to give up on this node's client.
func (s *NodeService) recordClient(nv *nodeVolumes, e *inuse.Entry) {
	if _, ok := s.deviceNoter(nv); !ok || s.cfg.StorageClient == nil {
		return
	}
	c, ok, err := s.cfg.StorageClient()
	if err != nil {
		klog.ErrorS(err, "read this node's client of the pool's filesystem, for the record of a volume staged", "volumeID", e.VolumeID)
		return
	}
	if ok {
		e.Client = &inuse.Client{Kind: c.Kind, ID: c.ID, Cluster: c.Cluster}
	}
}

// recordDevice adds to this node's record e of a volume the device its
// stage returned, on a shared pool and for a kind staged through a loop
// device; a stage that succeeded has no device whose detach is pending.
// A failure is logged: the stage is done, and the next sweep adds it.
func (s *NodeService) recordDevice(nv *nodeVolumes, e inuse.Entry, dev string) {
	if _, ok := s.deviceNoter(nv); !ok || dev == "" {
		return
	}
	e.Device, e.Pending = dev, nil
	if err := s.recordStaged(nv, e); err != nil {
		klog.ErrorS(err, "record the device of a volume staged", "volumeID", e.VolumeID, "device", dev)
	}
}

// noteDevices makes this node's records of nv's volumes (mine, as read
// by the reconcile) say what the kernel shows of their devices: a pending
// detach with its holders, refreshed at every look (Seen) while it lasts
// and dropped once the device is no longer detaching, and, with backfill,
// the device of a record without one. Not at start, before serving:
// after an upgrade every record lacks its device, and writing them all
// would delay serving; the first sweep does it. listing is a listing of
// the loop devices the caller made, nil to list here. A record is written
// only under its volume's lock and after reading it again there, so that
// a record a concurrent unstage dropped is never written back.
func (s *NodeService) noteDevices(nv *nodeVolumes, mine map[string][]inuse.Entry, listing []loop.Device, backfill bool) {
	n, ok := s.deviceNoter(nv)
	if !ok || len(mine) == 0 {
		return
	}
	if listing == nil {
		var err error
		if listing, err = s.host.Loops.List(); err != nil {
			klog.ErrorS(err, "list loop devices to record their state in the in-use records", "pool", nv.Dir())
			return
		}
	}
	want := func(id string) bool {
		es := mine[id]
		return len(es) > 0 && (backfill && es[0].Device == "" || es[0].Pending != nil)
	}
	for id, d := range n.DevicesIn(listing, want) {
		if len(mine[id]) == 0 || !d.Detaching && !want(id) {
			continue // not staged here by the records, or nothing to tell
		}
		s.withLock(id, func() { s.noteDevice(nv, n, id, d, backfill) })
	}
}

// noteDevice records d, this node's device of volume id, in its record.
func (s *NodeService) noteDevice(nv *nodeVolumes, n deviceNoter, id string, d loop.Device, backfill bool) {
	e, ok, err := nv.inuse.Get(id, s.cfg.NodeID)
	if err != nil || !ok {
		return // dropped meanwhile (an unstage), or unreadable: the reconcile's
	}
	holders, pending, err := n.PendingDetach(id, d)
	if err != nil {
		klog.ErrorS(err, "read a loop device's state for the in-use record", "volumeID", id, "device", d.Path)
		return
	}
	next := e
	if next.Device == "" && (backfill || pending) {
		next.Device = d.Path
	}
	next.Pending = nil
	if pending {
		next.Pending = &inuse.PendingDetach{Device: d.Path, Holders: holders, Seen: time.Now().UTC()}
	}
	if next.Device == e.Device && next.Pending == nil && e.Pending == nil {
		return
	}
	if err := nv.inuse.Put(next); err != nil {
		klog.ErrorS(err, "record a loop device's state in the in-use record", "volumeID", id, "device", d.Path)
		return
	}
	if pending {
		klog.InfoS("a loop device's detach waits for what still holds it open; recorded for the controller's refusals",
			"volumeID", id, "device", d.Path, "holders", holders)
	}
}
