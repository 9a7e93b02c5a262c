package pool

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// A blank image (a create without a content source) is not fsynced by the
// create: only its record is durable when CreateVolume returns, and the
// record says so (Volume.ImagePending). Until the volume is first used the
// image holds nothing but its size, so the record alone is enough to make
// it again, and Open does (restorePendingImage) if a crash of the machine
// lost it or left it short. Before the first use writes into it, CommitImage
// fsyncs the image and clears the mark: from then on a missing image is a
// lost volume, reported as such, never remade blank.
//
// Why: the image's fsync was a third cache flush per create. On the bench
// VM, leaving it out took create latency and CPU down by about a fifth.

// CommitImage makes the image of v durable and clears v.ImagePending,
// before anything can write into the image (NodeStageVolume calls it
// before attaching). A no-op for a volume without the mark. The caller
// holds the volume's lock.
func (p *Pool) CommitImage(v Volume) (Volume, error) {
	if !v.ImagePending {
		return v, nil
	}
	img := p.imagePath(v.ID)
	fd, err := p.openImage(v.ID, unix.O_RDONLY)
	if err != nil {
		return Volume{}, err
	}
	err = fsync(fd)
	_ = unix.Close(fd)
	if err != nil {
		return Volume{}, wrapNoSpace(&os.PathError{Op: "sync", Path: img, Err: err})
	}
	v.ImagePending = false
	if err := p.rewriteRecord(v); err != nil {
		return Volume{}, fmt.Errorf("commit image of volume %s: %w", v.ID, err)
	}
	return v, nil
}

// restorePendingImage remakes the blank image of a pending volume that a
// crash lost, or grows one it left shorter than the record (the size never
// reached the disk). Open calls it in repair mode, after the rename of a
// .tmp image, and fsyncs the directory after. It reports whether it
// changed anything.
func (p *Pool) restorePendingImage(v Volume) (bool, error) {
	if !v.ImagePending {
		return false, nil
	}
	img := p.imagePath(v.ID)
	var st unix.Stat_t
	err := unix.Stat(img, &st)
	switch {
	case err == nil && st.Size >= v.CapacityBytes:
		return false, nil
	case err == nil:
		if err := p.resizeBlank(v, st.Size); err != nil {
			return false, err
		}
		klog.InfoS("Grew the blank image of a volume a crash left short", "volumeID", v.ID, "fromBytes", st.Size, "toBytes", v.CapacityBytes)
		return true, nil
	case !errors.Is(err, unix.ENOENT):
		return false, &os.PathError{Op: "stat", Path: img, Err: err}
	}
	tmp := p.tmpImagePath(v.ID)
	if err := makeBlankImage(tmp, v); err != nil {
		return false, fmt.Errorf("remake image of volume %s: %w", v.ID, err)
	}
	if err := renameNoReplace(tmp, img); err != nil {
		_ = unix.Unlink(tmp)
		return false, &os.LinkError{Op: "rename", Old: tmp, New: img, Err: err}
	}
	klog.InfoS("Remade the blank image of a volume whose create a crash cut short", "volumeID", v.ID, "name", v.Name, "bytes", v.CapacityBytes)
	return true, nil
}

// resizeBlank gives the blank image of v, now cur bytes, v's size.
func (p *Pool) resizeBlank(v Volume, cur int64) error {
	fd, err := p.openImage(v.ID, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := sizeImage(fd, cur, v.CapacityBytes, v.Provisioning == ProvisioningThick); err != nil {
		return wrapNoSpace(&os.PathError{Op: "grow", Path: p.imagePath(v.ID), Err: err})
	}
	return nil
}
