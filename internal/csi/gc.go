package csi

import (
	"context"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/volume"
)

// GC sweeps the node for orphans. Every action on a volume is taken under
// that volume's lock, so a sweep never races a stage or a create; a busy
// volume is skipped until the next sweep. On a pool that several hosts
// share it touches only what is this node's, or nobody's: loop devices of
// this host's kernel (the backing file says which volume), in-use records
// of this node, and images without a record too old to be in flight.
//
// What is garbage is each kind's to say (collector: the image kind's
// devices and images); the in-use records are the service's, reconciled
// between the two sweeps.
func (s *NodeService) GC(ctx context.Context) (volume.GCReport, error) {
	var r volume.GCReport
	var cs []collector
	for _, nv := range s.vols.all {
		if c, ok := nv.NodeBackend.(collector); ok && !slices.Contains(cs, c) {
			cs = append(cs, c)
		}
	}
	var listing []loop.Device
	for _, c := range cs {
		l, err := c.SweepDevices(ctx, s.withLock, &r)
		if err != nil {
			return r, err
		}
		listing = append(listing, l...)
	}
	// After the device sweep: the devices it detached were in use by
	// nobody. Its listing, without them, tells which volumes are attached
	// (a second listing of every loop device per sweep cost as much as the
	// first).
	for _, nv := range s.vols.all {
		s.reconcile(nv, false, listing)
	}
	// Members of group snapshots never committed are deleted only where
	// the controller shares this process's locks (--mode all on a
	// node-local pool): a retried create holds them.
	groups := s.cfg.Controller && !s.cfg.Shared
	for _, c := range cs {
		if err := c.SweepPool(ctx, s.withLock, groups, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// collector is a node half with garbage of its own on this node (the
// image kind's: loop devices nothing uses, images without a record).
type collector interface {
	// SweepDevices detaches what nothing uses, each under its volume's
	// lock (lock), and returns the loop devices left, for the in-use
	// reconcile.
	SweepDevices(ctx context.Context, lock func(id string, fn func()), r *volume.GCReport) ([]loop.Device, error)
	// SweepPool handles the pool's orphans; groups: also the members of
	// group snapshots never committed.
	SweepPool(ctx context.Context, lock func(id string, fn func()), groups bool, r *volume.GCReport) error
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
func (s *NodeService) RunGC(ctx context.Context, interval time.Duration, report func(volume.GCReport)) {
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
