package pool

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volume"
)

// Expand grows the volume's image to size bytes — ftruncate for thin,
// fallocate of the new range for thick — and then records the new size
// atomically. The same size is success; smaller is ErrShrink. An image
// already larger than the record (an expansion interrupted after its file
// step) is recorded at its real size, which is returned. The loop device
// and the filesystem are the node's business (LOOP_SET_CAPACITY, grow).
// The caller holds the volume's lock.
//
// requested is the size the CO asked for (at most size; 0: size), which
// the record keeps as RequestedBytes for the volume's snapshots.
func (p *Pool) Expand(ctx context.Context, id string, size, requested int64) (volume.Volume, error) {
	return p.expand(ctx, id, size, requested)
}

func (p *Pool) expand(ctx context.Context, id string, size, requested int64) (volume.Volume, error) {
	v, err := p.get(id)
	if err != nil {
		return volume.Volume{}, err
	}
	if err := volume.CheckGrow(id, v.CapacityBytes, size); err != nil {
		return volume.Volume{}, err
	}
	if err := ctx.Err(); err != nil {
		return volume.Volume{}, err
	}
	// A blank volume not used yet gets its image now, at its old size,
	// and grows below like any other (which commits it).
	if err := p.materialize(v); err != nil {
		return volume.Volume{}, fmt.Errorf("expand volume %s: %w", id, err)
	}
	img := p.imagePath(id)
	fd, err := p.openImage(id, unix.O_WRONLY)
	if err != nil {
		return volume.Volume{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return volume.Volume{}, &os.PathError{Op: "stat", Path: img, Err: err}
	}
	cur := st.Size
	size = max(size, cur)
	if size > cur {
		if err := p.growImage(fd, img, cur, size, st.Blocks*512, v.Provisioning == volume.ProvisioningThick); err != nil {
			return volume.Volume{}, fmt.Errorf("expand volume %s: %w", id, err)
		}
		v.ImagePending = false // growImage fsynced it (pending.go)
	}
	req := requestedBytes(max(requested, v.Requested()), size)
	if size == v.CapacityBytes && req == v.RequestedBytes {
		return v, nil
	}
	v.CapacityBytes, v.RequestedBytes = size, req
	if err := p.vols.Replace(v); err != nil {
		// The image stays grown: shrinking it back could cut off space a
		// filesystem already uses; a retry or Open records it.
		return volume.Volume{}, fmt.Errorf("expand volume %s: %w", id, err)
	}
	return v, nil
}

// growImage makes the image size bytes and syncs it. A thin image may grow
// while what it lacks to be full fits the pool (the single-volume rule of
// create); a thick one needs its new range free, reserve and thick promises
// kept (checkRoom), and fallocate reserves it for real.
func (p *Pool) growImage(fd int, img string, cur, size, allocated int64, thick bool) error {
	need := size - allocated
	if thick {
		need = size - cur
	}
	if err := p.checkRoom(need, thick); err != nil {
		return err
	}
	err := sizeImage(fd, cur, size, thick)
	if err == nil {
		err = durable.Fsync(fd)
	}
	if err != nil {
		return wrapNoSpace(&os.PathError{Op: "grow", Path: img, Err: err})
	}
	return nil
}

// sizeImage makes the image open at fd, now cur bytes, size bytes: a thin
// one by its length alone, a thick one with [cur, size) allocated (mode 0
// extends the length too; unwritten extents, O(extents) not O(size), on
// ext4, xfs and btrfs).
func sizeImage(fd int, cur, size int64, thick bool) error {
	if thick {
		return preallocate(fd, cur, size-cur)
	}
	return durable.IgnoringEINTR(func() error { return unix.Ftruncate(fd, size) })
}

// rollForwardExpand records the size of an image larger than its record:
// an expansion that crashed between growing the file and rewriting the
// record (the node may already have grown a filesystem into the space).
// Open calls it in repair mode.
func (p *Pool) rollForwardExpand(v volume.Volume) error {
	var st unix.Stat_t
	if err := unix.Stat(p.imagePath(v.ID), &st); err != nil || st.Size <= v.CapacityBytes {
		return nil
	}
	old := v.CapacityBytes
	v.CapacityBytes = st.Size
	if err := p.vols.Replace(v); err != nil {
		return err
	}
	klog.InfoS("Rolled forward an interrupted expansion", "volumeID", v.ID, "fromBytes", old, "toBytes", st.Size)
	return nil
}
