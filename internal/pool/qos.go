package pool

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volume"
)

// normalQoS is the form a record keeps: nil for no limits, so that records
// of unlimited volumes stay as they were before limits existed.
func normalQoS(q *volume.QoS) *volume.QoS {
	if q == nil || q.IsZero() {
		return nil
	}
	c := *q
	return &c
}

// SetQoS is Modify of the limits alone.
func (p *Pool) SetQoS(id string, q volume.QoS) (volume.Volume, error) {
	return p.Modify(context.Background(), id, volume.Modification{QoS: q})
}

// Modify changes the volume's I/O limits and provisioning mode, and
// records both in one atomic record write: either all of m holds
// afterwards, or the record is unchanged. The same m again writes nothing
// (idempotent). The caller holds the volume's lock.
//
// Thin to thick allocates every block of the image (fallocate; unwritten
// extents, no data written), after checking that the pool has the room
// as a thick create does (ErrNoSpace, with nothing done, when it has
// not). Should the fallocate itself fail (another writer took the space
// since the check), the record stays thin; the blocks it got stay in the
// image, holding zeros, which a thin image may. Thick to thin changes the
// record only: the image's unwritten blocks stay allocated until the
// volume's filesystem discards them, because punching them out of a
// volume in use would race with the pod's writes into them.
func (p *Pool) Modify(ctx context.Context, id string, m volume.Modification) (volume.Volume, error) {
	v, err := p.get(id)
	if err != nil {
		return volume.Volume{}, err
	}
	q := m.QoS
	for _, n := range []int64{q.ReadIOPS, q.WriteIOPS, q.ReadBytesPerSecond, q.WriteBytesPerSecond} {
		if n < 0 {
			return volume.Volume{}, fmt.Errorf("%w: negative I/O limit %d", volume.ErrInvalidArgument, n)
		}
	}
	prov, err := provisioningOr(m.Provisioning, v.Provisioning)
	if err != nil {
		return volume.Volume{}, err
	}
	if v.Limits() == q && v.Provisioning == prov {
		return v, nil
	}
	if err := ctx.Err(); err != nil {
		return volume.Volume{}, err
	}
	if prov == volume.ProvisioningThick && v.Provisioning != volume.ProvisioningThick {
		if err := p.thicken(v); err != nil {
			return volume.Volume{}, fmt.Errorf("make volume %s thick: %w", id, err)
		}
		v.ImagePending = false // thicken fsynced it (pending.go)
	}
	v.QoS, v.Provisioning = normalQoS(&q), prov
	if err := p.vols.Replace(v); err != nil {
		return volume.Volume{}, fmt.Errorf("modify volume %s: %w", id, err)
	}
	return v, nil
}

// thicken allocates every block of the volume's image that it lacks,
// once checkRoom allows it, and syncs the image.
func (p *Pool) thicken(v volume.Volume) error {
	img := p.imagePath(v.ID)
	// What the image lacks: all of it when a blank volume not used yet
	// has none. Checked before anything is made, so a refusal leaves the
	// pool as it was.
	need := v.CapacityBytes
	var st unix.Stat_t
	switch err := unix.Stat(img, &st); {
	case err == nil:
		need = max(v.CapacityBytes, st.Size) - st.Blocks*512
	case err != unix.ENOENT:
		return &os.PathError{Op: "stat", Path: img, Err: err}
	}
	if err := p.checkRoom(max(0, need), true); err != nil {
		return err
	}
	// A blank volume not used yet gets its image now (sparse), and is
	// filled below like any other.
	if err := p.materialize(v); err != nil {
		return err
	}
	fd, err := p.openImage(v.ID, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: img, Err: err}
	}
	err = preallocate(fd, 0, st.Size)
	if err == nil {
		err = durable.Fsync(fd)
	}
	if err != nil {
		return wrapNoSpace(&os.PathError{Op: "fallocate", Path: img, Err: err})
	}
	return nil
}
