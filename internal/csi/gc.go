package csi

import (
	"context"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volview"
)

// GCReport is what one garbage-collection sweep found and did.
type GCReport struct {
	// DetachedLoops are loop devices backed by pool images that nothing
	// used (no mount, no bind, so neither staged nor published): debris of
	// a crash between attach and mount. Certain garbage: detached.
	DetachedLoops []string
	// Quarantined are volume IDs whose image had no record: moved to the
	// pool's quarantine, never deleted (they might hold data).
	Quarantined []string
	// RecordsWithoutImage are volumes whose data is gone (reported).
	RecordsWithoutImage []string
	// TempFiles are in-flight or crashed operations' files (reported;
	// the pool removes crash debris when it opens).
	TempFiles []string
	// QuarantineFiles waiting for an operator.
	QuarantineFiles []string
	// GroupLeftovers are member snapshots of group snapshots never
	// committed, deleted (gc_groups.go).
	GroupLeftovers []string
	// Took is how long the sweep took (set by RunGC): it reads every loop
	// device, mount and pool file, so it grows with the node's volumes.
	Took time.Duration
}

// Orphans is the number of findings an operator should look at.
func (r GCReport) Orphans() int {
	return len(r.RecordsWithoutImage) + len(r.QuarantineFiles)
}

// GC sweeps the node for orphans. Every action on a volume is taken under
// that volume's lock, so a sweep never races a stage or a create; a busy
// volume is skipped until the next sweep. On a pool that several hosts
// share it touches only what is this node's, or nobody's: loop devices of
// this host's kernel (the backing file says which volume), in-use records
// of this node, and images without a record too old to be in flight.
func (s *NodeService) GC(ctx context.Context) (GCReport, error) {
	var r GCReport
	listing, err := s.gcLoops(ctx, &r)
	if err != nil {
		return r, err
	}
	// After gcLoops: the devices it detached were in use by nobody. Its
	// listing, without them, tells which volumes are attached (a second
	// listing of every loop device per sweep cost as much as the first).
	for _, nv := range s.vols.all {
		s.reconcile(nv, false, listing)
	}
	o, err := s.pool.FindOrphans()
	if err != nil {
		return r, err
	}
	// On a shared pool the pool lists, and moves, only images too old to
	// be another host's create whose record this host does not see yet
	// (pool.Pool.QuarantineImage): the volume's lock is this process's
	// and serialises nothing on the other hosts.
	for _, id := range o.ImagesWithoutRecord {
		s.withLock(id, func() {
			moved, err := s.pool.QuarantineImage(id)
			if err != nil {
				klog.ErrorS(err, "quarantine image without record", "volumeID", id)
				return
			}
			if moved {
				r.Quarantined = append(r.Quarantined, id)
			}
		})
	}
	for _, id := range o.RecordsWithoutImage {
		s.withLock(id, func() {
			if s.pool.ImageLost(id) {
				r.RecordsWithoutImage = append(r.RecordsWithoutImage, id)
			}
		})
	}
	r.TempFiles = o.TempFiles
	s.gcGroupLeftovers(ctx, &r)
	if o, err = s.pool.FindOrphans(); err == nil {
		r.QuarantineFiles = o.Quarantined
	}
	return r, nil
}

// gcLoops detaches loop devices backed by pool images that no mount and no
// bind uses. Staged block volumes are binds at <staging>/device, staged
// filesystems are mounts, published ones binds: anything else is a leak.
//
// It returns the listing it swept, without the devices it detached.
func (s *NodeService) gcLoops(ctx context.Context, r *GCReport) ([]loop.Device, error) {
	devs, err := s.host.Loops.List()
	if err != nil {
		return nil, err
	}
	// One mount table for the sweep: a device it shows in use is not
	// garbage now, whatever happens next. Only a device it shows unused is
	// checked again, under the volume's lock, against a fresh table (a
	// stage may have mounted it since). Reading the table per device made
	// a sweep of a node with 1,000 volumes parse 1,000 tables of 2,000
	// mounts.
	table, err := s.host.Mounts.Table()
	if err != nil {
		return nil, err
	}
	// Indexed by device: asking the table once per device walked all of
	// it each time (2,000 mounts × 1,000 devices).
	snapshot := volview.IndexTable(table)
	left := make([]loop.Device, 0, len(devs))
	img := s.imageBackend()
	for _, d := range devs {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		left = append(left, d)
		if snapshot.Used(d) {
			continue
		}
		id, ok := volview.VolumeID(s.pool.VolumesDir(), d.BackingFile)
		// The name says which volume; only the file's identity says it is
		// this node's pool's file: the same path string can name another
		// node's client mount of the shared filesystem, or a client
		// remounted over a dead one, and detaching another node's device
		// would take away one that node just attached and is about to
		// mount. A device whose file the kernel cannot stat any more (a
		// dead client's) is decided otherwise (internal/pool/imagenode/dead.go).
		if !ok || !s.host.Loops.BackedBy(d, filepath.Join(s.pool.VolumesDir(), filepath.Base(d.BackingFile))) {
			if img != nil && s.gcUnreachable(img, d, r) {
				left = left[:len(left)-1]
			} else if ok {
				klog.V(4).InfoS("loop device not backed by this pool's file (another mount of it, by identity); left alone", "device", d.Path, "image", d.BackingFile)
			}
			continue
		}
		// Nodes sharing one kernel and one file: the owner written into
		// the device says whose it is.
		if owner := s.host.Loops.Owner(d); s.cfg.Shared && owner != "" && owner != pool.DeviceOwner(s.cfg.NodeID) {
			klog.V(4).InfoS("loop device of another node of the shared pool; left alone", "device", d.Path, "image", d.BackingFile, "owner", owner)
			continue
		}
		s.withLock(id, func() {
			table, err := s.host.Mounts.Table()
			if err != nil || volview.Used(table, d) {
				return
			}
			// Re-read sysfs: the device must still be the one we looked at.
			cur, err := s.host.Loops.Find(d.BackingFile)
			if err != nil || !slices.ContainsFunc(cur, func(x loop.Device) bool { return x.Path == d.Path }) {
				return
			}
			if err := s.host.Loops.Detach(d.Path); err != nil {
				klog.ErrorS(err, "detach unused loop device", "device", d.Path, "volumeID", id)
				return
			}
			klog.InfoS("detached a loop device nothing used", "device", d.Path, "volumeID", id, "image", d.BackingFile)
			r.DetachedLoops = append(r.DetachedLoops, d.Path)
			left = left[:len(left)-1]
		})
	}
	return left, nil
}

// gcUnreachable detaches d, a device nothing uses, when it is this node's
// device left on a dead client's file of image (internal/pool/imagenode/dead.go: used by
// nothing, and the volume recorded in use by this node alone). It reports
// whether it detached it.
func (s *NodeService) gcUnreachable(img unreachableSweeper, d loop.Device, r *GCReport) bool {
	id, ok := img.UnreachableImage(d)
	if !ok {
		return false
	}
	if !img.RecordedHereOnly(id) {
		klog.V(4).InfoS("loop device on a dead client's file, not recorded by this node alone; left alone", "device", d.Path, "image", d.BackingFile)
		return false
	}
	detached := false
	s.withLock(id, func() {
		table, err := s.host.Mounts.Table()
		if err != nil || volview.Used(table, d) {
			return
		}
		if err := s.host.Loops.DetachUnreachable(d); err != nil {
			klog.ErrorS(err, "detach a loop device left on a dead client's file", "device", d.Path, "volumeID", id)
			return
		}
		klog.InfoS("detached a loop device left on a dead client's file", "device", d.Path, "volumeID", id, "image", d.BackingFile)
		r.DetachedLoops = append(r.DetachedLoops, d.Path)
		detached = true
	})
	return detached
}

// unreachableSweeper is a node half whose devices can be left on a dead
// client's file of a shared pool (the image kind's, dead.go): it names
// the volume of such a device, and whether this node alone records it in
// use, so that the sweep may detach the device.
type unreachableSweeper interface {
	UnreachableImage(d loop.Device) (id string, ok bool)
	RecordedHereOnly(id string) bool
}

// imageBackend is the node half of this node's pool whose devices the
// sweep looks at, nil when the pool serves none.
func (s *NodeService) imageBackend() unreachableSweeper {
	for _, nv := range s.vols.all {
		if b, ok := nv.NodeBackend.(unreachableSweeper); ok && nv.Dir() == s.pool.Dir() {
			return b
		}
	}
	return nil
}

// withLock runs fn holding id's lock, or skips it when a call is in flight.
func (s *NodeService) withLock(id string, fn func()) {
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return
	}
	defer unlock()
	fn()
}

// RunGC sweeps now and then every interval until ctx is done, handing each
// report to report (metrics, events); findings are logged here.
func (s *NodeService) RunGC(ctx context.Context, interval time.Duration, report func(GCReport)) {
	for {
		start := time.Now()
		r, err := s.GC(ctx)
		r.Took = time.Since(start)
		switch {
		case err != nil:
			klog.ErrorS(err, "garbage collection sweep failed")
		case r.Orphans() > 0 || len(r.DetachedLoops) > 0 || len(r.Quarantined) > 0:
			klog.InfoS("garbage collection found orphans", "detachedLoops", r.DetachedLoops, "quarantined", r.Quarantined,
				"recordsWithoutImage", r.RecordsWithoutImage, "quarantineFiles", len(r.QuarantineFiles))
		}
		if report != nil && err == nil {
			report(r)
		}
		// Tests wait for this line: a sweep runs beside serving, so the
		// first one may end well after the socket answers.
		klog.V(4).InfoS("garbage collection sweep done", "took", r.Took, "failed", err != nil)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
