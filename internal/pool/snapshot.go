package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// SnapshotID returns the ID that a snapshot named name has.
//
// Like VolumeID: version 1, unless the snapshot was made before pools had
// IDs.
func (p *Pool) SnapshotID(name string) string {
	if legacy := volid.LegacySnapshot(name); p.snaps.Has(legacy) {
		return legacy
	}
	return volid.NewSnapshot(p.ident.ID, name)
}

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
func (p *Pool) CreateSnapshot(ctx context.Context, req volume.SnapshotRequest) (volume.Snapshot, error) {
	return p.createSnapshot(ctx, req)
}

// GetSnapshot reads the snapshot's record from disk and refreshes the
// index; ErrSnapshotNotFound when there is none, and for a member of a
// group snapshot not committed (or being deleted): group.go.
func (p *Pool) GetSnapshot(id string) (volume.Snapshot, error) {
	s, err := p.getSnapshot(id)
	if err == nil && !p.visible(s) {
		return volume.Snapshot{}, fmt.Errorf("%w: %s is a member of group snapshot %s, which is not committed or is being deleted",
			volume.ErrSnapshotNotFound, id, s.GroupSnapshotID)
	}
	return s, err
}

// GetSnapshotByName returns the snapshot made with that name.
func (p *Pool) GetSnapshotByName(name string) (volume.Snapshot, error) {
	return p.GetSnapshot(p.SnapshotID(name))
}

// DeleteSnapshot removes the snapshot's image and record; an unknown ID is
// not an error (CSI: DeleteSnapshot of a missing snapshot MUST succeed).
// A member of a committed group snapshot is ErrInGroup: it goes with its
// group (DeleteVolumeGroupSnapshot begins by marking the group, which
// frees its members).
func (p *Pool) DeleteSnapshot(ctx context.Context, id string) error {
	if s, err := p.getSnapshot(id); err == nil && p.inLiveGroup(s) {
		return fmt.Errorf("%w: %s is a member of group snapshot %s; delete the group instead", volume.ErrInGroup, id, s.GroupSnapshotID)
	}
	return p.deleteSnapshot(ctx, id)
}

// ListSnapshots returns every visible snapshot of the index, sorted by ID
// (not the members of a group snapshot that is not committed: group.go).
func (p *Pool) ListSnapshots() []volume.Snapshot {
	p.refresh(p.snaps.Refresh)
	snaps := slices.DeleteFunc(p.snaps.List(), func(s volume.Snapshot) bool { return !p.visible(s) })
	for i := range snaps {
		snaps[i].Parameters = maps.Clone(snaps[i].Parameters) // the caller's
	}
	return snaps
}

func (p *Pool) createSnapshot(ctx context.Context, req volume.SnapshotRequest) (volume.Snapshot, error) {
	if err := validName(req.Name); err != nil {
		return volume.Snapshot{}, err
	}
	id := p.SnapshotID(req.Name)
	if s, err := p.getSnapshot(id); err == nil {
		return sameSnapshot(s, req)
	} else if !errors.Is(err, volume.ErrSnapshotNotFound) {
		return volume.Snapshot{}, err
	}
	src, err := p.get(req.SourceVolumeID)
	if err != nil {
		return volume.Snapshot{}, err
	}
	if src.Node != p.opts.NodeID {
		return volume.Snapshot{}, fmt.Errorf("volume %s %w %q, not to %q: snapshot it on that node",
			src.ID, ErrOtherNode, src.Node, p.opts.NodeID)
	}
	srcImg := p.imagePath(src.ID)
	// A blank volume not used yet is snapshotted as what it is: blank.
	if err := p.materialize(src); err != nil {
		return volume.Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, err)
	}
	if !p.imageExists(src.ID) {
		return volume.Snapshot{}, fmt.Errorf("volume %s: %w (%s)", src.ID, volume.ErrImageMissing, srcImg)
	}
	tmpImg := p.snapTmpImagePath(id)
	fd, engine, err := cloneImage(ctx, srcImg, tmpImg, 0, false)
	if err != nil {
		return volume.Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	s := volume.Snapshot{
		Version: recordVersion, ID: id, Name: req.Name, SourceVolumeID: src.ID,
		SizeBytes: st.Size, RestoreBytes: requestedBytes(src.Requested(), st.Size),
		FSType: src.FSType, Encryption: cloneEncryption(src.Encryption), Engine: engine,
		Parameters: maps.Clone(req.Parameters), Node: p.opts.NodeID,
		GroupSnapshotID: req.GroupSnapshotID, CreatedAt: time.Now().UTC(),
	}
	// As in create: the clone is fsynced while the record is written.
	var draft *recordstore.Draft[volume.Snapshot]
	if err == nil {
		draft, err = p.prepareSyncing(s, fd, tmpImg)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	abort := func(err error) (volume.Snapshot, error) {
		if draft != nil {
			draft.Abandon()
		}
		_ = unix.Unlink(tmpImg)
		return volume.Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, wrapNoSpace(err))
	}
	if err != nil {
		return abort(err)
	}
	if err := draft.Commit(); err != nil {
		if errors.Is(err, volume.ErrAlreadyExists) {
			return abort(fmt.Errorf("%w (name %s) was created concurrently", err, quoteShort(req.Name)))
		}
		return abort(err)
	}
	// Committed: as in create, a failure from here undoes the commit.
	if err := p.publishImage(p.sdir, tmpImg, id); err != nil {
		return abort(err)
	}
	if err := draft.Durable(); err != nil {
		_ = unix.Rename(p.snapImagePath(id), tmpImg)
		return abort(err)
	}
	return s, nil
}

// prepareSyncing writes the snapshot's temporary record while another
// goroutine fsyncs its image open at imageFD (named imagePath in errors):
// as in create, both must be durable before the commit point, and side by
// side the two fsyncs overlap instead of adding up. It returns once both
// have ended; on an error the temporary record is gone, and the image is
// the caller's to remove.
func (p *Pool) prepareSyncing(s volume.Snapshot, imageFD int, imagePath string) (*recordstore.Draft[volume.Snapshot], error) {
	imageSynced := make(chan error, 1)
	go func() { imageSynced <- durable.Fsync(imageFD) }()
	draft, err := p.snaps.Prepare(s)
	serr := <-imageSynced
	if err != nil {
		return nil, err
	}
	if serr != nil {
		draft.Abandon()
		return nil, &os.PathError{Op: "sync", Path: imagePath, Err: serr}
	}
	return draft, nil
}

// sameSnapshot answers a retried CreateSnapshot (CSI: same name and same
// source → the same snapshot; another source → ALREADY_EXISTS).
func sameSnapshot(s volume.Snapshot, req volume.SnapshotRequest) (volume.Snapshot, error) {
	if s.GroupSnapshotID != req.GroupSnapshotID {
		return volume.Snapshot{}, fmt.Errorf("%w: snapshot %s (name %s) is a member of group snapshot %q, not of %q",
			volume.ErrAlreadyExists, s.ID, quoteShort(s.Name), s.GroupSnapshotID, req.GroupSnapshotID)
	}
	if s.Name != req.Name || s.SourceVolumeID != req.SourceVolumeID {
		return volume.Snapshot{}, fmt.Errorf("%w: snapshot %s (name %s) is of volume %s, not %s",
			volume.ErrAlreadyExists, s.ID, quoteShort(s.Name), s.SourceVolumeID, quoteShort(req.SourceVolumeID))
	}
	return s, nil
}

// getSnapshot reads the record from disk and refreshes the index.
func (p *Pool) getSnapshot(id string) (volume.Snapshot, error) { return p.snaps.Get(id) }
