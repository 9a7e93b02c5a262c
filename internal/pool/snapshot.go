package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/recordstore"
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
	// SizeBytes is the size of the image: every volume restored from it
	// is at least this large.
	SizeBytes int64 `json:"sizeBytes"`
	// RestoreBytes is what the source volume's CO asked for when it is less
	// than SizeBytes (0 otherwise): the restore size the CO is told, so a
	// claim as large as the source claim restores it even where the
	// filesystem's minimum made the image larger (RestoreSize).
	RestoreBytes int64 `json:"restoreBytes,omitempty"`
	// FSType is the source volume's filesystem type, which restores inherit.
	FSType string `json:"fsType"`
	// Encryption is the source volume's when the snapshot was cut (nil:
	// not encrypted): its data is the source's, under the same data key,
	// which restores inherit.
	Encryption *Encryption `json:"encryption,omitempty"`
	// Engine is how the image was made: EngineReflink or EngineCopy.
	Engine string `json:"engine"`
	// Parameters are the CreateSnapshot parameters as given.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Node is the node whose pool holds the snapshot.
	Node string `json:"node"`
	// GroupSnapshotID is the group snapshot the snapshot is a member of
	// ("" for none): it is visible only while that group's record is
	// (group.go), and goes only with its group.
	GroupSnapshotID string `json:"groupSnapshotID,omitempty"`
	// CreatedAt is when the snapshot was cut (CSI creation_time).
	CreatedAt time.Time `json:"createdAt"`
}

// SnapshotRequest is a validated request for a new snapshot.
type SnapshotRequest struct {
	Name           string
	SourceVolumeID string
	Parameters     map[string]string
	// GroupSnapshotID makes the snapshot a member of that group
	// (GroupMemberName names it).
	GroupSnapshotID string
	// Secrets are CreateSnapshot's (or CreateVolumeGroupSnapshot's).
	Secrets volume.Secrets
}

// RestoreSize is the smallest request a restore of the snapshot honours
// (CSI Snapshot.size_bytes): the source claim's request, which may be less
// than the image; the restored volume is as large as the image anyway.
func (s Snapshot) RestoreSize() int64 {
	if s.RestoreBytes > 0 {
		return s.RestoreBytes
	}
	return s.SizeBytes
}

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
func (p *Pool) CreateSnapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	return p.createSnapshot(ctx, req)
}

// GetSnapshot reads the snapshot's record from disk and refreshes the
// index; ErrSnapshotNotFound when there is none, and for a member of a
// group snapshot not committed (or being deleted): group.go.
func (p *Pool) GetSnapshot(id string) (Snapshot, error) {
	s, err := p.getSnapshot(id)
	if err == nil && !p.visible(s) {
		return Snapshot{}, fmt.Errorf("%w: %s is a member of group snapshot %s, which is not committed or is being deleted",
			ErrSnapshotNotFound, id, s.GroupSnapshotID)
	}
	return s, err
}

// GetSnapshotByName returns the snapshot made with that name.
func (p *Pool) GetSnapshotByName(name string) (Snapshot, error) {
	return p.GetSnapshot(p.SnapshotID(name))
}

// DeleteSnapshot removes the snapshot's image and record; an unknown ID is
// not an error (CSI: DeleteSnapshot of a missing snapshot MUST succeed).
// A member of a committed group snapshot is ErrInGroup: it goes with its
// group (DeleteVolumeGroupSnapshot begins by marking the group, which
// frees its members).
func (p *Pool) DeleteSnapshot(ctx context.Context, id string) error {
	if s, err := p.getSnapshot(id); err == nil && p.inLiveGroup(s) {
		return fmt.Errorf("%w: %s is a member of group snapshot %s; delete the group instead", ErrInGroup, id, s.GroupSnapshotID)
	}
	return p.deleteSnapshot(ctx, id)
}

// ListSnapshots returns every visible snapshot of the index, sorted by ID
// (not the members of a group snapshot that is not committed: group.go).
func (p *Pool) ListSnapshots() []Snapshot {
	p.refresh(p.snaps.Refresh)
	snaps := slices.DeleteFunc(p.snaps.List(), func(s Snapshot) bool { return !p.visible(s) })
	for i := range snaps {
		snaps[i].Parameters = maps.Clone(snaps[i].Parameters) // the caller's
	}
	return snaps
}

func (p *Pool) createSnapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	if err := validName(req.Name); err != nil {
		return Snapshot{}, err
	}
	id := p.SnapshotID(req.Name)
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
	tmpImg := p.snapTmpImagePath(id)
	fd, engine, err := cloneImage(ctx, srcImg, tmpImg, 0, false)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	s := Snapshot{
		Version: recordVersion, ID: id, Name: req.Name, SourceVolumeID: src.ID,
		SizeBytes: st.Size, RestoreBytes: requestedBytes(src.Requested(), st.Size),
		FSType: src.FSType, Encryption: src.Encryption.clone(), Engine: engine,
		Parameters: maps.Clone(req.Parameters), Node: p.opts.NodeID,
		GroupSnapshotID: req.GroupSnapshotID, CreatedAt: time.Now().UTC(),
	}
	// As in create: the clone is fsynced while the record is written.
	var draft *recordstore.Draft[Snapshot]
	if err == nil {
		draft, err = p.prepareSyncing(s, fd, tmpImg)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	abort := func(err error) (Snapshot, error) {
		if draft != nil {
			draft.Abandon()
		}
		_ = unix.Unlink(tmpImg)
		return Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", id, src.ID, wrapNoSpace(err))
	}
	if err != nil {
		return abort(err)
	}
	if err := draft.Commit(); err != nil {
		if errors.Is(err, ErrAlreadyExists) {
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
func (p *Pool) prepareSyncing(s Snapshot, imageFD int, imagePath string) (*recordstore.Draft[Snapshot], error) {
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
func sameSnapshot(s Snapshot, req SnapshotRequest) (Snapshot, error) {
	if s.GroupSnapshotID != req.GroupSnapshotID {
		return Snapshot{}, fmt.Errorf("%w: snapshot %s (name %s) is a member of group snapshot %q, not of %q",
			ErrAlreadyExists, s.ID, quoteShort(s.Name), s.GroupSnapshotID, req.GroupSnapshotID)
	}
	if s.Name != req.Name || s.SourceVolumeID != req.SourceVolumeID {
		return Snapshot{}, fmt.Errorf("%w: snapshot %s (name %s) is of volume %s, not %s",
			ErrAlreadyExists, s.ID, quoteShort(s.Name), s.SourceVolumeID, quoteShort(req.SourceVolumeID))
	}
	return s, nil
}

// getSnapshot reads the record from disk and refreshes the index.
func (p *Pool) getSnapshot(id string) (Snapshot, error) { return p.snaps.Get(id) }
