package imagenode

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/reading"
	"github.com/filevol/filevol/internal/volume"
)

// Node is the node half of image volumes (volid.KindImage) in one
// pool: an image file attached to a loop device (direct I/O), which is
// bound at <staging>/device (block) or carries a filesystem mounted at the
// staging path, then bound onto each target. Every call reads the
// kernel's state (sysfs, mountinfo) and acts on it, so a retried call, a
// restarted driver or a rebooted node converge to the requested state.
// What the devices and mounts mean is volview's to say.
type Node struct {
	pool *pool.Pool
	host hostos.Host
	// node is this node's ID, for messages.
	node string
	// fence: the pool is shared by several nodes. The staged device then
	// holds a lock on its image for as long as it exists
	// (loop.Options.Lock), so that no other node's device can attach it
	// while this one could still write, even after a force-detach.
	fence bool
	// readings are shared by the read-only answers (health, stats) asked
	// at the same time (reading.go).
	readings *reading.Shared
}

// New is the node half of the image volumes of pool p on the kernel h,
// on the node nodeID; fence when p is shared by several nodes. Its
// read-only answers share their readings of the kernel (reading.Shared).
func New(p *pool.Pool, h hostos.Host, nodeID string, fence bool) *Node {
	return &Node{pool: p, host: h, node: nodeID, fence: fence, readings: reading.NewShared(h)}
}

func (b *Node) Dir() string                          { return b.pool.Dir() }
func (b *Node) Get(id string) (volume.Volume, error) { return b.pool.Get(id) }

// InUse: a loop device backed by the volume's image.
func (b *Node) InUse(id string) (bool, error) {
	devs, err := b.host.Loops.Find(b.pool.ImagePath(id))
	return len(devs) > 0, err
}

// gone reports whether the volume's record is gone: a DeleteVolume
// (another process: the controller and the node share no lock) removed
// it while this node staged it.
func (b *Node) gone(id string) bool {
	_, err := b.pool.Get(id)
	return errors.Is(err, volume.ErrNotFound)
}

// deviceBlockSize is the logical block size of every volume's device. It
// must not change over a volume's life: a filesystem made with smaller
// sectors (xfs sectsz=512, ext4 with 1 KiB blocks) refuses to mount on a
// device with larger ones, and block volumes' partition tables and O_DIRECT
// users depend on it too. The kernel's default follows the image's O_DIRECT
// alignment, which on an xfs pool grows to 4 KiB once a snapshot or clone
// shares the image's extents. 4 KiB is a multiple of every
// alignment a pool filesystem asks, so direct I/O stays on everywhere, and
// mkfs picks 4 KiB sectors and blocks on such a device.
const deviceBlockSize = 4096

// deviceScheduler is every volume's device's I/O scheduler: none, the
// kernel's default for a new loop device, set explicitly because a loop
// device's queue keeps the scheduler the last user of its number chose.
// mq-deadline was measured against it (docs/data-path.md, `bench
// --fio-ab scheduler`) and did no better at any workload, beyond the noise.
const deviceScheduler = "none"

// ensureLoop returns the loop device of image with the wanted read-only
// flag, attaching one only when sysfs shows none. attached says whether
// this call attached it.
//
// lock asks for the fencing lock (Node.fence) on a device it attaches:
// ErrLocked (FAILED_PRECONDITION) while another node's device holds the
// image. Only the staged device takes it: a read-only device that a block
// publish adds beside this node's own staged writer would conflict with
// that writer's lock. Every other device takes loop.Options.Mark.
//
// unrecorded (volume.StageRequest.Unrecorded) lets it skip the look-up, which
// reads every loop device of the node (the kernel keeps no index from a
// file to its devices: at 1,000 volumes, most of a stage's time), when
// the image is also unlocked: no record says no earlier stage of this
// node left a device but a deferred detach, and that one, as every device
// this driver attaches, holds a lock on the image. The look-up stays for
// everything else: a re-stage, a shared pool (whose locks are other
// nodes' too), and a device from a driver that did not mark its devices
// (recorded at start when it is staged, ReconcileInUse).
func (b *Node) ensureLoop(ctx context.Context, image string, readOnly, lock, unrecorded bool) (loop.Device, bool, error) {
	var devs []loop.Device
	if !unrecorded || lock {
		var err error
		if devs, err = b.host.Loops.Find(image); err != nil {
			return loop.Device{}, false, err
		}
	} else if held, err := b.host.Loops.Locked(image); err != nil || held {
		if devs, err = b.host.Loops.Find(image); err != nil {
			return loop.Device{}, false, err
		}
	}
	devs = slices.DeleteFunc(devs, func(d loop.Device) bool { return !b.ownsDevice(d) })
	for _, d := range devs {
		if d.ReadOnly == readOnly && !d.Deleted && !d.Detaching {
			return d, false, nil
		}
	}
	for _, d := range devs {
		if d.Detaching {
			// An earlier detach is waiting for another process to close the
			// device. A second device on the same image would be a double
			// attach: let the CO retry once the kernel has finished.
			return loop.Device{}, false, answer.Aborted("loop device %s of %s is still being detached: its detach waits for the last holder to let go (%s); retry once it has",
				d.Path, image, b.host.Loops.Holders(d.Path))
		}
	}
	d, err := b.host.Loops.Attach(ctx, image, loop.Options{ReadOnly: readOnly, DirectIO: true, BlockSize: deviceBlockSize, Lock: lock, Mark: !lock,
		Scheduler: deviceScheduler, Owner: pool.DeviceOwner(b.node)})
	if errors.Is(err, loop.ErrLocked) {
		return loop.Device{}, false, fmt.Errorf("%w: another node still holds the image %s through its loop device and could write to it; "+
			"that node must unstage the volume (or be cut off from the pool's storage) before node %s may stage it", err, image, b.node)
	}
	if err != nil {
		return loop.Device{}, false, fmt.Errorf("attach %s: %w", image, err)
	}
	return d, true, nil
}

// detachAfterFailure detaches a device this call attached before failing,
// so a failed call leaves no device behind. A failure to detach is logged:
// the call's own error is what the CO must see, and the garbage collector
// detaches what nothing uses.
func (b *Node) detachAfterFailure(dev loop.Device, call string) {
	if err := b.host.Loops.Detach(dev.Path); err != nil {
		klog.ErrorS(err, "detach after failed "+call, "device", dev.Path)
	}
}

// FreezePoint returns a mount point of the volume's filesystem on this
// node ("" when none): freezing acts on the filesystem (the superblock),
// so any mount of its root will do; the staging mount is usually first.
func (b *Node) FreezePoint(id string) (string, error) {
	u, err := reading.ImageUsage(b.host, b.pool.ImagePath(id))
	if err != nil {
		return "", err
	}
	for _, m := range u.FS() {
		if m.Root == "/" {
			return m.MountPoint, nil
		}
	}
	return "", nil
}

// Attached lists the pool's volumes whose image backs a loop device.
func (b *Node) Attached() ([]string, error) {
	devs, err := b.host.Loops.List()
	if err != nil {
		return nil, fmt.Errorf("list loop devices: %w", err)
	}
	return b.AttachedIn(devs), nil
}

// AttachedIn is Attached on a listing the caller already holds.
func (b *Node) AttachedIn(devs []loop.Device) []string {
	var ids []string
	for _, d := range devs {
		id, ok := pool.ImageVolumeID(b.pool.VolumesDir(), d.BackingFile)
		if !ok || slices.Contains(ids, id) {
			continue
		}
		// Another node sharing this kernel, its pool mounted at the same
		// path in its own mount namespace, shows its devices under our
		// pool's path: only the file's identity makes the volume ours.
		if b.host.Loops.BackedBy(d, b.pool.ImagePath(id)) {
			ids = append(ids, id)
		}
	}
	// A device on a dead client's file of one of our images may be ours
	// (dead.go): its volume counts as attached, so that this
	// node's in-use record, which makes it ours, stays until the sweep has
	// detached it.
	for _, d := range devs {
		if id, ok := b.namedImage(d); ok && !slices.Contains(ids, id) && b.host.Loops.Unreachable(d) {
			ids = append(ids, id)
		}
	}
	return ids
}

// StagedEntry says how the volume is staged from its devices' uses: its
// filesystem's first mount is the staging path (a mount volume), or the
// directory of its first device bind (a block volume). Devices that no
// mount or bind uses are the garbage collector's, not staged.
func (b *Node) StagedEntry(id string) (inuse.Entry, bool, error) {
	u, err := reading.ImageUsage(b.host, b.pool.ImagePath(id))
	if err != nil || len(u.Uses) == 0 {
		return inuse.Entry{}, false, err
	}
	e := inuse.Entry{VolumeID: id}
	if fsMounts := u.FS(); len(fsMounts) > 0 {
		e.StagingPath, e.ReadOnly = fsMounts[0].MountPoint, fsMounts[0].Device.ReadOnly
	} else {
		binds := u.Binds()
		e.StagingPath, e.Block, e.ReadOnly = filepath.Dir(binds[0].MountPoint), true, binds[0].Device.ReadOnly
	}
	return e, true, nil
}

// ownsDevice reports whether d, a device on one of this pool's images, is
// this node's to reuse. On a shared pool several node processes may share
// one kernel and one file (tests, or one host serving several nodes);
// there the path and the file's identity are the same for every node's
// device, and only the owner written into it tells them apart. Reusing
// another node's device would make this node a second writer that no lock
// stops. A device without an owner is an older build's, on this kernel:
// this node's.
func (b *Node) ownsDevice(d loop.Device) bool {
	if !b.fence {
		return true
	}
	owner := b.host.Loops.Owner(d)
	return owner == "" || owner == pool.DeviceOwner(b.node)
}

// Traits are the image kind's (pool.Traits).
func (b *Node) Traits() volume.Traits { return pool.Traits }
