package pool

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
)

// QoS are a volume's I/O limits, per pod that uses it: operations and
// bytes per second, read and write apart. 0 is "no limit". The pool only
// keeps them; the node enforces them (internal/csi, qos*.go).
type QoS struct {
	ReadIOPS            int64 `json:"readIOPS,omitempty"`
	WriteIOPS           int64 `json:"writeIOPS,omitempty"`
	ReadBytesPerSecond  int64 `json:"readBytesPerSecond,omitempty"`
	WriteBytesPerSecond int64 `json:"writeBytesPerSecond,omitempty"`
}

// IsZero reports whether q limits nothing.
func (q QoS) IsZero() bool { return q == QoS{} }

// normal is the form a record keeps: nil for no limits, so that records
// of unlimited volumes stay as they were before limits existed.
func (q *QoS) normal() *QoS {
	if q == nil || q.IsZero() {
		return nil
	}
	c := *q
	return &c
}

// Limits returns the volume's limits (zero when it has none).
func (v Volume) Limits() QoS {
	if v.QoS == nil {
		return QoS{}
	}
	return *v.QoS
}

// SetQoS is Modify of the limits alone.
func (p *Pool) SetQoS(id string, q QoS) (Volume, error) {
	return p.Modify(context.Background(), id, Modification{QoS: q})
}

// Modification is what ControllerModifyVolume changes of a volume.
type Modification struct {
	// QoS are the volume's new I/O limits (zero: none).
	QoS QoS
	// Provisioning is the new provisioning mode; "" keeps the current one.
	Provisioning string
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
func (p *Pool) Modify(ctx context.Context, id string, m Modification) (Volume, error) {
	v, err := p.get(id)
	if err != nil {
		return Volume{}, err
	}
	q := m.QoS
	for _, n := range []int64{q.ReadIOPS, q.WriteIOPS, q.ReadBytesPerSecond, q.WriteBytesPerSecond} {
		if n < 0 {
			return Volume{}, fmt.Errorf("%w: negative I/O limit %d", ErrInvalidArgument, n)
		}
	}
	prov := m.Provisioning
	switch prov {
	case "":
		prov = v.Provisioning
	case ProvisioningThin, ProvisioningThick:
	default:
		return Volume{}, fmt.Errorf("%w: provisioning %s, want %q or %q", ErrInvalidArgument, quoteShort(prov), ProvisioningThin, ProvisioningThick)
	}
	if v.Limits() == q && v.Provisioning == prov {
		return v, nil
	}
	if err := ctx.Err(); err != nil {
		return Volume{}, err
	}
	if prov == ProvisioningThick && v.Provisioning != ProvisioningThick {
		if err := p.thicken(v); err != nil {
			return Volume{}, fmt.Errorf("make volume %s thick: %w", id, err)
		}
		v.ImagePending = false // thicken fsynced it (pending.go)
	}
	v.QoS, v.Provisioning = q.normal(), prov
	if err := p.vols.Replace(v); err != nil {
		return Volume{}, fmt.Errorf("modify volume %s: %w", id, err)
	}
	return v, nil
}

// thicken allocates every block of the volume's image that it lacks,
// once checkRoom allows it, and syncs the image.
func (p *Pool) thicken(v Volume) error {
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
	err = durable.IgnoringEINTR(func() error { return unix.Fallocate(fd, 0, 0, st.Size) })
	if err == nil {
		err = durable.Fsync(fd)
	}
	if err != nil {
		return wrapNoSpace(&os.PathError{Op: "fallocate", Path: img, Err: err})
	}
	return nil
}
