package pool

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volume"
)

// A blank volume (a create without a content source) is pending until its
// first use: its record is durable when CreateVolume returns and says so
// (Volume.ImagePending), but its image holds nothing but its size, so the
// record alone is enough to make it. A thin one is not even made by the
// create: materialize makes it when something first needs the file (a
// stage, a snapshot or clone of the volume, an expansion). A thick one is
// made by the create, so that a pool without the room refuses it then, but
// not fsynced. Either way a crash of the machine may lose the image or
// leave it short before its first use, and materialize makes or grows it
// again; it never held data.
//
// Before the first use writes into it, CommitImage makes the image durable
// and clears the mark: from then on a missing image is a lost volume,
// reported as such (ImageMissing), never made again blank.
//
// Why: the image was a second new file and a third fsync per create. On
// the bench VM, leaving out its fsync took create latency and CPU down by
// about a fifth; leaving out the file, by another tenth of the machine's
// work per create under 8 clients.

// CommitImage makes the image of v (made now if it is pending and absent)
// durable and clears v.ImagePending, before anything can write into the
// image (NodeStageVolume calls it before attaching). A no-op for a volume
// without the mark. The caller holds the volume's lock.
func (p *Pool) CommitImage(v volume.Volume) (volume.Volume, error) {
	if !v.ImagePending {
		return v, nil
	}
	if err := p.materialize(v); err != nil {
		return volume.Volume{}, err
	}
	img := p.imagePath(v.ID)
	fd, err := p.openImage(v.ID, unix.O_RDONLY)
	if err != nil {
		return volume.Volume{}, err
	}
	err = durable.Fsync(fd)
	_ = unix.Close(fd)
	if err != nil {
		return volume.Volume{}, wrapNoSpace(&os.PathError{Op: "sync", Path: img, Err: err})
	}
	v.ImagePending = false
	// The rewrite ends with a directory fsync that starts after the image
	// was made: it makes the image's name durable along with the record.
	if err := p.vols.Replace(v); err != nil {
		return volume.Volume{}, fmt.Errorf("commit image of volume %s: %w", v.ID, err)
	}
	return v, nil
}

// materialize makes the blank image of a pending volume if it is absent,
// or grows it to the record's size if a crash left it short. Not durable:
// CommitImage, or the fsync of whoever needs it durable, does that. A
// no-op for a volume that is not pending. The caller holds the volume's
// lock.
func (p *Pool) materialize(v volume.Volume) error {
	if !v.ImagePending {
		return nil
	}
	img := p.imagePath(v.ID)
	var st unix.Stat_t
	err := unix.Stat(img, &st)
	switch {
	case err == nil && st.Size >= v.CapacityBytes:
		return nil
	case err == nil:
		return p.resizeBlank(v, st.Size)
	case !errors.Is(err, unix.ENOENT):
		return &os.PathError{Op: "stat", Path: img, Err: err}
	}
	tmp := p.tmpImagePath(v.ID)
	if err := makeBlankImage(tmp, v); err != nil {
		return fmt.Errorf("make the image of volume %s: %w", v.ID, err)
	}
	if err := durable.RenameNoReplace(tmp, img); err != nil {
		_ = unix.Unlink(tmp)
		return &os.LinkError{Op: "rename", Old: tmp, New: img, Err: err}
	}
	return nil
}

// imageLost reports whether volume id has no image file and is not
// pending either: its data is gone. A pending volume without an image is
// a blank volume not used yet.
func (p *Pool) imageLost(id string) bool { return !p.imageExists(id) && !p.pending(id) }

// pending reports whether the record of volume id marks it pending. The
// index answers, or the record on disk for a volume the index does not
// know yet (made by another process sharing the pool).
func (p *Pool) pending(id string) bool {
	v, ok := p.vols.Cached(id)
	if !ok {
		var err error
		if v, err = p.get(id); err != nil {
			return false
		}
	}
	return v.ImagePending
}

// resizeBlank gives the blank image of v, now cur bytes, v's size.
func (p *Pool) resizeBlank(v volume.Volume, cur int64) error {
	fd, err := p.openImage(v.ID, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := sizeImage(fd, cur, v.CapacityBytes, v.Provisioning == volume.ProvisioningThick); err != nil {
		return wrapNoSpace(&os.PathError{Op: "grow", Path: p.imagePath(v.ID), Err: err})
	}
	return nil
}
