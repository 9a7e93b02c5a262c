package pool

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// delete moves the image aside, removes the record (the commit point),
// makes that durable, and only then unlinks the image. A crash before the
// record is gone leaves record + .tmp image, which Open rolls back to the
// intact volume; a crash after leaves a .tmp image without record, which
// is certainly garbage. The fsync before the unlink is what rules out the
// one bad state: a record whose image is gone for good.
func (p *Pool) delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	img, tmp, rec := p.imagePath(id), p.tmpImagePath(id), p.recordPath(id)
	synced := p.vsync.mark()
	// ENOENT: already gone (a retried delete, or a record without image);
	// CSI spec: DeleteVolume of a missing volume MUST succeed.
	err := unix.Rename(img, tmp)
	moved := err == nil
	if err != nil && err != unix.ENOENT {
		return fmt.Errorf("delete volume %s: %w", id, &os.LinkError{Op: "rename", Old: img, New: tmp, Err: err})
	}
	// A format marker must never outlive its volume: a later volume of the
	// same name (same ID) would have its data taken for a half-made mkfs.
	_ = unix.Unlink(p.formatMarkerPath(id))
	_ = unix.Unlink(p.growMarkerPath(id))
	if err := unix.Unlink(rec); err != nil && err != unix.ENOENT {
		// Still a volume: put its image back so it stays usable.
		if moved {
			_ = unix.Rename(tmp, img)
		}
		return fmt.Errorf("delete volume %s: %w", id, &os.PathError{Op: "remove", Path: rec, Err: err})
	}
	p.idx.remove(id)
	// Even when nothing was found: a previous attempt may have removed the
	// record without making that durable before it failed.
	if err := p.vsync.wait(synced); err != nil {
		return fmt.Errorf("delete volume %s: sync %s: %w", id, p.vdir, err)
	}
	if err := unix.Unlink(tmp); err != nil && err != unix.ENOENT {
		return fmt.Errorf("delete volume %s: %w", id, &os.PathError{Op: "remove", Path: tmp, Err: err})
	}
	return nil
}

// unlinkVolume removes a volume's files in delete's order, without the
// fsync: for undoing a create whose directory fsync failed, when the
// directory cannot be made durable anyway.
func (p *Pool) unlinkVolume(id string) {
	_ = unix.Rename(p.imagePath(id), p.tmpImagePath(id))
	_ = unix.Unlink(p.recordPath(id))
	_ = unix.Unlink(p.tmpImagePath(id))
}
