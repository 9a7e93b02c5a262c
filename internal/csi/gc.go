package csi

import (
	"context"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
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
}

// Orphans is the number of findings an operator should look at.
func (r GCReport) Orphans() int {
	return len(r.RecordsWithoutImage) + len(r.QuarantineFiles)
}

// GC sweeps the node for orphans. Every action on a volume is taken under
// that volume's lock, so a sweep never races a stage or a create; a busy
// volume is skipped until the next sweep.
func (s *NodeService) GC(ctx context.Context) (GCReport, error) {
	var r GCReport
	if err := s.gcLoops(ctx, &r); err != nil {
		return r, err
	}
	o, err := s.pool.FindOrphans()
	if err != nil {
		return r, err
	}
	for _, id := range o.ImagesWithoutRecord {
		s.withLock(id, func() {
			if err := s.pool.QuarantineImage(id); err != nil {
				klog.ErrorS(err, "quarantine image without record", "volumeID", id)
				return
			}
			r.Quarantined = append(r.Quarantined, id)
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
	if o, err = s.pool.FindOrphans(); err == nil {
		r.QuarantineFiles = o.Quarantined
	}
	return r, nil
}

// gcLoops detaches loop devices backed by pool images that no mount and no
// bind uses. Staged block volumes are binds at <staging>/device, staged
// filesystems are mounts, published ones binds: anything else is a leak.
func (s *NodeService) gcLoops(ctx context.Context, r *GCReport) error {
	devs, err := s.host.ListLoops()
	if err != nil {
		return err
	}
	prefix := s.pool.VolumesDir() + "/"
	for _, d := range devs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		id, ok := imageID(prefix, d.BackingFile)
		if !ok {
			continue
		}
		s.withLock(id, func() {
			table, err := s.host.Mounts()
			if err != nil || len(mountsOf(table, d)) > 0 || len(deviceBinds(table, d)) > 0 {
				return
			}
			// Re-read sysfs: the device must still be the one we looked at.
			cur, err := s.host.FindLoop(d.BackingFile)
			if err != nil || !containsDevice(cur, d) {
				return
			}
			if err := s.host.DetachLoop(d.Path); err != nil {
				klog.ErrorS(err, "detach unused loop device", "device", d.Path, "volumeID", id)
				return
			}
			klog.InfoS("detached a loop device nothing used", "device", d.Path, "volumeID", id, "image", d.BackingFile)
			r.DetachedLoops = append(r.DetachedLoops, d.Path)
		})
	}
	return nil
}

// imageID returns the volume ID of an image path inside the pool.
func imageID(prefix, backing string) (string, bool) {
	name, ok := strings.CutPrefix(backing, prefix)
	if !ok {
		return "", false
	}
	name = strings.TrimPrefix(name, ".tmp-")
	id, ok := strings.CutSuffix(name, ".img")
	return id, ok && !strings.Contains(id, "/")
}

func containsDevice(devs []loop.Device, d loop.Device) bool {
	for _, x := range devs {
		if x.Path == d.Path {
			return true
		}
	}
	return false
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
		r, err := s.GC(ctx)
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
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
