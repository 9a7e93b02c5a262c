package imagenode

import (
	"path/filepath"
	"slices"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volview"
)

// Devices left on a dead client's files.
//
// A node killed with a shared pool's volume staged, whose filevol and FUSE
// client then start again without a reboot, still has the loop device it
// attached, on the file of the dead client's mount. The kernel cannot stat
// that file any more (loop.Unreachable: ENOTCONN), so neither the file's
// identity (BackedBy) nor the owner written into the device (Owner) can
// be read: the only thing left is sysfs's path, which after the dead mount
// was unmounted lazily is relative to that mount ("/pool/volumes/<id>.img").
// Left alone such a device is never detached: unstage and the sweep know
// their devices by identity.
//
// What decides, and why it is safe:
//
//   - The path decides only which volume: the name of an image of this pool
//     (loop.Names: our image path, or a suffix of it as a lazily unmounted
//     or another mount namespace's mount shows it). Volume IDs are 128-bit
//     random, so the name is that volume's and no other's. It never decides
//     whose device it is: several nodes may share one kernel (tests, the
//     e2e multinode cluster), each with the pool mounted at the same path
//     in a mount namespace of its own, or at paths whose lazily unmounted
//     remains all read "/pool/...".
//   - Whose it is is decided by what only this node has: a mount of the
//     device at or under the staging path the CO gave this node's
//     NodeUnstageVolume (this node's kubelet directory, in this node's
//     mount table), or, for a device nothing mounts, the in-use records:
//     this node recorded the volume before attaching it, removes the record
//     only after detaching, and no other node holds a record of it
//     (inuse). Another node's dead device of the same volume would need
//     that node's record, and then this node leaves it alone.
//   - The detach itself re-checks under the exclusive open that blocks a
//     re-attach that the number still holds the same path and is still
//     unreachable (loop.DetachUnreachable), and that open fails while any
//     mount namespace has a filesystem of the device mounted.
//
// The sweep never unmounts a staging mount of such a device, though the
// filesystem on it is as dead as the device: kubelet still takes the
// volume as staged there, and a NodePublishVolume would bind what the
// emptied directory then holds into the pod. NodeUnstageVolume, which
// kubelet calls for it once its pods are gone, unmounts it and detaches.
//
// A device whose client is only cut off (not killed) answers ENOTCONN too
// once its client gives up on the server; it is its node's, is staged
// there (mounted, or recorded by that node), and so is never another
// node's to take.

// unreachableImage returns the volume whose image d's backing path names
// when the kernel can no longer identify d's backing file.
func (b *Node) unreachableImage(d loop.Device) (string, bool) {
	id, ok := b.namedImage(d)
	return id, ok && b.host.Loops.Unreachable(d)
}

// namedImage returns the volume whose image of this pool d's backing path
// names (loop.Names), by the path string alone.
func (b *Node) namedImage(d loop.Device) (string, bool) {
	id, tmp, ok := pool.ImageFileID(filepath.Base(d.BackingFile), pool.ValidID)
	if !ok || tmp || !loop.Names(d, b.pool.ImagePath(id)) {
		return "", false
	}
	return id, true
}

// recordedHereOnly reports whether this node, and no other, holds an
// in-use record of the volume.
func (b *Node) recordedHereOnly(id string) bool {
	es, err := inuse.New(b.pool.Dir()).Of(id)
	return err == nil && len(es) > 0 && !slices.ContainsFunc(es, func(e inuse.Entry) bool { return e.Node != b.node })
}

// unreachableOf returns those of devs, unreachable devices of volume id
// (unreachableImage), that are this node's (see above): used at or under
// staging, or used by nothing and recorded by this node alone.
func (b *Node) unreachableOf(id, staging string, devs []loop.Device, table mount.Table) []loop.Device {
	var out []loop.Device
	for _, d := range devs {
		uses := append(volview.MountsOf(table, d), volview.BindsOf(table, d)...)
		if len(uses) == 0 && b.recordedHereOnly(id) ||
			staging != "" && slices.ContainsFunc(uses, func(m mount.Info) bool { return volview.Within(m.MountPoint, staging) }) {
			out = append(out, d)
		}
	}
	return out
}
