package pool

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/recordstore"
)

// delete removes a volume. An unknown ID is not an error (CSI spec:
// DeleteVolume of a missing volume MUST succeed).
func (p *Pool) delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	// A volume's node markers go with it, before its record: a format
	// marker must never outlive its volume (nodestate.ForgetVolume).
	return deleteRecord(ctx, p.vols, "volume", id, p.tag, func() { p.node.ForgetVolume(id) })
}

// deleteSnapshot removes a snapshot the same way (CSI: DeleteSnapshot of
// a missing snapshot MUST succeed).
func (p *Pool) deleteSnapshot(ctx context.Context, id string) error {
	if err := validSnapshotID(id); err != nil {
		return err
	}
	return deleteRecord(ctx, p.snaps, "snapshot", id, p.tag, nil)
}

// deleteRecord moves the image aside, removes the record (the commit
// point), makes that durable, and only then unlinks the image; the same
// for volumes and snapshots. A crash before the record is gone leaves
// record + .tmp image, which Open rolls back to the intact one; a crash
// after leaves a .tmp image without record, which is certainly garbage.
// The fsync before the unlink is what rules out the one bad state: a
// record whose image is gone for good. before, if set, runs just before
// the record goes (its changes to the directory share the fsync). tag
// names this process's owner in the temporary image (lock.go).
func deleteRecord[T record](ctx context.Context, st *recordstore.Store[T], kind, id, tag string, before func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := st.Dir()
	img, tmp := imagePath(dir, id), dir+"/"+tmpImageName(id, tag)
	synced := st.Mark()
	// ENOENT: already gone (a retried delete, or a record without image).
	err := unix.Rename(img, tmp)
	moved := err == nil
	if err != nil && err != unix.ENOENT {
		return fmt.Errorf("delete %s %s: %w", kind, id, &os.LinkError{Op: "rename", Old: img, New: tmp, Err: err})
	}
	if before != nil {
		before()
	}
	if err := st.Remove(id); err != nil {
		// Still there: put its image back so it stays usable.
		if moved {
			_ = unix.Rename(tmp, img)
		}
		return fmt.Errorf("delete %s %s: %w", kind, id, err)
	}
	// Even when nothing was found: a previous attempt may have removed the
	// record without making that durable before it failed.
	if err := st.Synced(synced); err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, id, err)
	}
	if err := unix.Unlink(tmp); err != nil && err != unix.ENOENT {
		return fmt.Errorf("delete %s %s: %w", kind, id, &os.PathError{Op: "remove", Path: tmp, Err: err})
	}
	return nil
}
