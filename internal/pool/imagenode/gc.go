package imagenode

import (
	"context"
	"path/filepath"
	"slices"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
	"k8s.io/klog/v2"
)

// SweepDevices detaches loop devices backed by pool images that no mount and no
// bind uses. Staged block volumes are binds at <staging>/device, staged
// filesystems are mounts, published ones binds: anything else is a leak.
//
// It returns the listing it swept, without the devices it detached. lock
// runs fn holding the volume id's lock, the one the services take for
// every call on it, or skips fn when a call on it is in flight: a sweep
// never races a stage or a create, and a busy volume waits for the next
// sweep.
func (b *Node) SweepDevices(ctx context.Context, lock func(id string, fn func()), r *volume.GCReport) ([]loop.Device, error) {
	devs, err := b.host.Loops.List()
	if err != nil {
		return nil, err
	}
	// One mount table for the sweep: a device it shows in use is not
	// garbage now, whatever happens next. Only a device it shows unused is
	// checked again, under the volume's lock, against a fresh table (a
	// stage may have mounted it since). Reading the table per device made
	// a sweep of a node with 1,000 volumes parse 1,000 tables of 2,000
	// mounts.
	table, err := b.host.Mounts.Table()
	if err != nil {
		return nil, err
	}
	// Indexed by device: asking the table once per device walked all of
	// it each time (2,000 mounts × 1,000 devices).
	snapshot := volview.IndexTable(table)
	left := make([]loop.Device, 0, len(devs))
	for _, d := range devs {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		left = append(left, d)
		if snapshot.Used(d) {
			continue
		}
		id, ok := pool.ImageVolumeID(b.pool.VolumesDir(), d.BackingFile)
		// The name says which volume; only the file's identity says it is
		// this node's pool's file: the same path string can name another
		// node's client mount of the shared filesystem, or a client
		// remounted over a dead one, and detaching another node's device
		// would take away one that node just attached and is about to
		// mount. A device whose file the kernel cannot stat any more (a
		// dead client's) is decided otherwise (internal/pool/imagenode/dead.go).
		if !ok || !b.host.Loops.BackedBy(d, filepath.Join(b.pool.VolumesDir(), filepath.Base(d.BackingFile))) {
			if b.sweepUnreachable(lock, d, r) {
				left = left[:len(left)-1]
			} else if ok {
				klog.V(4).InfoS("loop device not backed by this pool's file (another mount of it, by identity); left alone", "device", d.Path, "image", d.BackingFile)
			}
			continue
		}
		// Nodes sharing one kernel and one file: the owner written into
		// the device says whose it is.
		if owner := b.host.Loops.Owner(d); b.fence && owner != "" && owner != pool.DeviceOwner(b.node) {
			klog.V(4).InfoS("loop device of another node of the shared pool; left alone", "device", d.Path, "image", d.BackingFile, "owner", owner)
			continue
		}
		lock(id, func() {
			table, err := b.host.Mounts.Table()
			if err != nil || volview.Used(table, d) {
				return
			}
			// Re-read sysfs: the device must still be the one we looked at.
			cur, err := b.host.Loops.Find(d.BackingFile)
			if err != nil || !slices.ContainsFunc(cur, func(x loop.Device) bool { return x.Path == d.Path }) {
				return
			}
			if err := b.host.Loops.Detach(d.Path); err != nil {
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

// sweepUnreachable detaches d, a device nothing uses, when it is this node's
// device left on a dead client's file of image (internal/pool/imagenode/dead.go: used by
// nothing, and the volume recorded in use by this node alone). It reports
// whether it detached it.
func (b *Node) sweepUnreachable(lock func(id string, fn func()), d loop.Device, r *volume.GCReport) bool {
	id, ok := b.unreachableImage(d)
	if !ok {
		return false
	}
	if !b.recordedHereOnly(id) {
		klog.V(4).InfoS("loop device on a dead client's file, not recorded by this node alone; left alone", "device", d.Path, "image", d.BackingFile)
		return false
	}
	detached := false
	lock(id, func() {
		table, err := b.host.Mounts.Table()
		if err != nil || volview.Used(table, d) {
			return
		}
		if err := b.host.Loops.DetachUnreachable(d); err != nil {
			klog.ErrorS(err, "detach a loop device left on a dead client's file", "device", d.Path, "volumeID", id)
			return
		}
		klog.InfoS("detached a loop device left on a dead client's file", "device", d.Path, "volumeID", id, "image", d.BackingFile)
		r.DetachedLoops = append(r.DetachedLoops, d.Path)
		detached = true
	})
	return detached
}

// SweepPool looks for the pool's orphans: images without a record go to
// the quarantine (never deleted: they might hold data), records whose
// image is gone are reported, and, with groups, the members of group
// snapshots never committed are deleted (sweepGroupLeftovers).
func (b *Node) SweepPool(ctx context.Context, lock func(id string, fn func()), groups bool, r *volume.GCReport) error {
	o, err := b.pool.FindOrphans()
	if err != nil {
		return err
	}
	// On a shared pool the pool lists, and moves, only images too old to
	// be another host's create whose record this host does not see yet
	// (pool.Pool.QuarantineImage): the volume's lock is this process's
	// and serialises nothing on the other hosts.
	for _, id := range o.ImagesWithoutRecord {
		lock(id, func() {
			moved, err := b.pool.QuarantineImage(id)
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
		lock(id, func() {
			if b.pool.ImageLost(id) {
				r.RecordsWithoutImage = append(r.RecordsWithoutImage, id)
			}
		})
	}
	r.TempFiles = o.TempFiles
	if groups {
		b.sweepGroupLeftovers(ctx, lock, r)
	}
	if o, err = b.pool.FindOrphans(); err == nil {
		r.QuarantineFiles = o.Quarantined
	}
	return nil
}

// groupLeftoverAge is how old the members of a group with no record must
// be before the sweep deletes them: a create cuts its members and commits
// its group within one call (seconds); a retry of that call deletes them
// itself.
const groupLeftoverAge = 10 * time.Minute

// sweepGroupLeftovers deletes the members of groups never committed that no
// retry came for (pool.GroupLeftovers). Only where the controller shares
// the caller's locks (--mode all on a node-local pool; SweepPool's
// groups): a create of the same group, which reuses the members' IDs,
// holds their locks, so the sweep never deletes a member a retry has just
// cut again. Elsewhere the retried create is what removes them.
func (b *Node) sweepGroupLeftovers(ctx context.Context, lock func(id string, fn func()), r *volume.GCReport) {
	for _, id := range b.pool.GroupLeftovers(groupLeftoverAge) {
		if ctx.Err() != nil {
			return
		}
		lock(id, func() {
			dropped, err := b.pool.DropGroupLeftover(ctx, id, groupLeftoverAge)
			if err != nil {
				klog.ErrorS(err, "delete a member of a group snapshot never committed", "snapshotID", id)
				return
			}
			if dropped {
				klog.InfoS("deleted a member of a group snapshot never committed", "snapshotID", id)
				r.GroupLeftovers = append(r.GroupLeftovers, id)
			}
		})
	}
}
