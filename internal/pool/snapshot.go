package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Snapshot is the record of one snapshot, stored as snapshots/<id>.json
// beside its image. The image is an independent file (a reflink clone or
// a sparse copy of the volume's image): deleting the volume leaves it
// whole, deleting it never touches the volume.
type Snapshot struct {
	// Version of the record format (recordVersion).
	Version int `json:"version"`
	// ID is "fs-" + 32 hex digits of sha256(Name): a retried CreateSnapshot
	// finds its snapshot without an index (CSI: MUST be idempotent).
	ID string `json:"id"`
	// Name is the CO's name (CreateSnapshotRequest.name).
	Name string `json:"name"`
	// SourceVolumeID is the volume it was cut from.
	SourceVolumeID string `json:"sourceVolumeID"`
	// SizeBytes is the size of the image: the smallest volume it restores
	// into (CSI Snapshot.size_bytes).
	SizeBytes int64 `json:"sizeBytes"`
	// FSType is the source volume's filesystem type, which restores inherit.
	FSType string `json:"fsType"`
	// Engine is how the image was made: EngineReflink or EngineCopy.
	Engine string `json:"engine"`
	// Parameters are the CreateSnapshot parameters as given.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Node is the node whose pool holds the snapshot.
	Node string `json:"node"`
	// CreatedAt is when the snapshot was cut (CSI creation_time).
	CreatedAt time.Time `json:"createdAt"`
}

// SnapshotRequest is a validated request for a new snapshot.
type SnapshotRequest struct {
	Name           string
	SourceVolumeID string
	Parameters     map[string]string
}

// SnapshotID returns the ID that a snapshot named name has.
func SnapshotID(name string) string { return snapshotID(name) }

// ValidSnapshotID reports whether id has the shape of a snapshot ID; the
// error wraps ErrInvalidID and says why.
func ValidSnapshotID(id string) error { return validSnapshotID(id) }

// SnapshotImagePath returns the path of the snapshot's image. id must be valid.
func (p *Pool) SnapshotImagePath(id string) string { return p.snapImagePath(id) }

// CreateSnapshot cuts a snapshot of a volume: the image is cloned (reflink,
// else a hole-preserving copy), then committed exactly like a volume (see
// the package doc). A snapshot with that name and the same source is
// returned as it is; with another source, ErrAlreadyExists. A source in no
// record is ErrNotFound, one of another node ErrOtherNode. The caller keeps
// the source image still meanwhile (its lock, FIFREEZE when mounted).
func (p *Pool) CreateSnapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	return p.createSnapshot(ctx, req)
}

// GetSnapshot reads the snapshot's record from disk and refreshes the
// index; ErrSnapshotNotFound when there is none.
func (p *Pool) GetSnapshot(id string) (Snapshot, error) { return p.getSnapshot(id) }

// GetSnapshotByName returns the snapshot made with that name.
func (p *Pool) GetSnapshotByName(name string) (Snapshot, error) {
	return p.getSnapshot(snapshotID(name))
}

// DeleteSnapshot removes the snapshot's image and record; an unknown ID is
// not an error (CSI: DeleteSnapshot of a missing snapshot MUST succeed).
func (p *Pool) DeleteSnapshot(ctx context.Context, id string) error {
	return p.deleteSnapshot(ctx, id)
}

// ListSnapshots returns every snapshot of the index, sorted by ID.
func (p *Pool) ListSnapshots() []Snapshot { return p.snaps.list() }

func (p *Pool) createSnapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	if err := validName(req.Name); err != nil {
		return Snapshot{}, err
	}
	id := snapshotID(req.Name)
	if s, err := p.getSnapshot(id); err == nil {
		return sameSnapshot(s, req)
	} else if !errors.Is(err, ErrSnapshotNotFound) {
		return Snapshot{}, err
	}
	src, err := p.get(req.SourceVolumeID)
	if err != nil {
		return Snapshot{}, err
	}
	if src.Node != p.opts.NodeID {
		return Snapshot{}, fmt.Errorf("volume %s %w %q, not to %q: snapshot it on that node",
			src.ID, ErrOtherNode, src.Node, p.opts.NodeID)
	}
	srcImg := p.imagePath(src.ID)
	// A blank volume not used yet is snapshotted as what it is: blank.
	if err := p.materialize(src); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, err)
	}
	if !p.imageExists(src.ID) {
		return Snapshot{}, fmt.Errorf("volume %s: %w (%s)", src.ID, ErrImageMissing, srcImg)
	}
	tmpImg, tmpRec := p.snapTmpImagePath(id), ""
	abort := func(err error) (Snapshot, error) {
		if tmpRec != "" {
			_ = unix.Unlink(tmpRec)
		}
		_ = unix.Unlink(tmpImg)
		return Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, wrapNoSpace(err))
	}
	fd, engine, err := cloneImage(ctx, srcImg, tmpImg, 0, false)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	s := Snapshot{
		Version: recordVersion, ID: id, Name: req.Name, SourceVolumeID: src.ID,
		SizeBytes: st.Size, FSType: src.FSType, Engine: engine,
		Parameters: maps.Clone(req.Parameters), Node: p.opts.NodeID,
		CreatedAt: time.Now().UTC(),
	}
	var data []byte
	if err == nil {
		data, err = encodeSnapshot(&s)
	}
	// As in create: the clone is fsynced while the record is written.
	if err == nil {
		tmpRec, err = writeTmpFileSyncing(p.sdir, id, data, fd, tmpImg)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return abort(err)
	}
	synced := p.ssync.mark()
	if err := renameNoReplace(tmpRec, p.snapRecordPath(id)); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return abort(fmt.Errorf("%w: snapshot %s (name %s) was created concurrently", ErrAlreadyExists, id, quoteShort(req.Name)))
		}
		return abort(err)
	}
	// Committed: as in create, a failure from here undoes the commit.
	if err := p.publishSnapImage(tmpImg, id); err != nil {
		_ = unix.Unlink(p.snapRecordPath(id))
		_ = unix.Unlink(tmpImg)
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", id, wrapNoSpace(err))
	}
	if err := p.ssync.wait(synced); err != nil {
		_ = unix.Rename(p.snapImagePath(id), tmpImg)
		_ = unix.Unlink(p.snapRecordPath(id))
		_ = unix.Unlink(tmpImg)
		return Snapshot{}, fmt.Errorf("snapshot %s: sync %s: %w", id, p.sdir, err)
	}
	p.snaps.put(s)
	return s, nil
}

// sameSnapshot answers a retried CreateSnapshot (CSI: same name and same
// source → the same snapshot; another source → ALREADY_EXISTS).
func sameSnapshot(s Snapshot, req SnapshotRequest) (Snapshot, error) {
	if s.Name != req.Name || s.SourceVolumeID != req.SourceVolumeID {
		return Snapshot{}, fmt.Errorf("%w: snapshot %s (name %s) is of volume %s, not %s",
			ErrAlreadyExists, s.ID, quoteShort(s.Name), s.SourceVolumeID, quoteShort(req.SourceVolumeID))
	}
	return s, nil
}

// publishSnapImage renames the temporary image into place, never over a
// file: a stray image there is quarantined first (it might hold data).
func (p *Pool) publishSnapImage(tmp, id string) error {
	img := p.snapImagePath(id)
	err := renameNoReplace(tmp, img)
	if errors.Is(err, unix.EEXIST) {
		if err = p.quarantineFrom(p.sdir, id+imgSuffix); err == nil {
			err = renameNoReplace(tmp, img)
		}
	}
	return err
}

// deleteSnapshot follows delete's order (delete.go): image aside, record
// gone (the commit point), directory fsync, image unlinked.
func (p *Pool) deleteSnapshot(ctx context.Context, id string) error {
	if err := validSnapshotID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	img, tmp, rec := p.snapImagePath(id), p.snapTmpImagePath(id), p.snapRecordPath(id)
	synced := p.ssync.mark()
	err := unix.Rename(img, tmp)
	moved := err == nil
	if err != nil && err != unix.ENOENT {
		return fmt.Errorf("delete snapshot %s: %w", id, &os.LinkError{Op: "rename", Old: img, New: tmp, Err: err})
	}
	if err := unix.Unlink(rec); err != nil && err != unix.ENOENT {
		if moved {
			_ = unix.Rename(tmp, img)
		}
		return fmt.Errorf("delete snapshot %s: %w", id, &os.PathError{Op: "remove", Path: rec, Err: err})
	}
	p.snaps.remove(id)
	if err := p.ssync.wait(synced); err != nil {
		return fmt.Errorf("delete snapshot %s: sync %s: %w", id, p.sdir, err)
	}
	if err := unix.Unlink(tmp); err != nil && err != unix.ENOENT {
		return fmt.Errorf("delete snapshot %s: %w", id, &os.PathError{Op: "remove", Path: tmp, Err: err})
	}
	return nil
}

// getSnapshot reads the record from disk and refreshes the index.
func (p *Pool) getSnapshot(id string) (Snapshot, error) {
	if err := validSnapshotID(id); err != nil {
		return Snapshot{}, err
	}
	s, err := p.readSnapshotRecord(id)
	switch {
	case err == nil:
		p.snaps.put(s)
	case errors.Is(err, ErrSnapshotNotFound):
		p.snaps.remove(id)
	}
	return s, err
}
