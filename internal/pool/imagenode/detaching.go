package imagenode

import (
	"fmt"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/pool"
)

// What the node tells the controller of its devices, through its in-use
// records (internal/inuse Entry.Device and Pending): the controller
// refuses another node's attach while this node's device holds the image
// (fencing), and cannot look at this node's kernel to say which device,
// or why it stays. A detach of a device something still holds open (an
// operator's losetup -d while a pod's mount or a process has it) exits 0
// but only marks the device (autoclear, Device.Detaching): it stays, and
// with it the lock, until the last holder lets go.

// DevicesIn returns, by volume, this node's loop device in devs (a
// listing of the loop devices) of each of the pool's volumes that want
// asks about, and of every volume whose device's detach is pending: that
// device before any other of the volume, else the lowest-numbered. Only a
// device backed by this pool's file (by identity) and this node's (its
// owner) counts; the identity is read only for the devices asked about.
func (b *Node) DevicesIn(devs []loop.Device, want func(id string) bool) map[string]loop.Device {
	out := map[string]loop.Device{}
	for _, d := range devs {
		id, ok := pool.ImageVolumeID(b.pool.VolumesDir(), d.BackingFile)
		if !ok || !d.Detaching && !want(id) {
			continue
		}
		if cur, seen := out[id]; seen && (cur.Detaching || !d.Detaching) {
			continue
		}
		if b.host.Loops.BackedBy(d, b.pool.ImagePath(id)) && b.ownsDevice(d) {
			out[id] = d
		}
	}
	return out
}

// PendingDetach reads d, a device of volume id, again and reports
// whether its detach is still pending, and then what holds it open
// (loop.Holders: mounts, processes, stacked devices).
func (b *Node) PendingDetach(id string, d loop.Device) (holders string, pending bool, err error) {
	cur, ok, err := b.host.Loops.Get(d.Path, b.pool.ImagePath(id))
	if err != nil {
		return "", false, fmt.Errorf("read loop device %s of volume %s: %w", d.Path, id, err)
	}
	if !ok || !cur.Detaching {
		return "", false, nil
	}
	return b.host.Loops.Holders(d.Path), true, nil
}
