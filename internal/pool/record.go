package pool

import (
	"github.com/filevol/filevol/internal/recordstore"
)

// recordVersion is the Version this package writes; the stores refuse to
// read other versions rather than misread them after a downgrade.
const recordVersion = 1

// File names beside the records. Only validated IDs are put into them.
const (
	tmpPrefix = recordstore.TmpPrefix
	imgSuffix = ".img"
)

// RecordID is the volume's ID: its record is volumes/<ID>.json
// (recordstore.Record).
func (v Volume) RecordID() string { return v.ID }

// RecordVersion is the version of the volume's record format.
func (v Volume) RecordVersion() int { return v.Version }

// RecordID is the snapshot's ID: its record is snapshots/<ID>.json
// (recordstore.Record).
func (s Snapshot) RecordID() string { return s.ID }

// RecordVersion is the version of the snapshot's record format.
func (s Snapshot) RecordVersion() int { return s.Version }

// record is what the code shared by volumes and snapshots (recover.go,
// delete.go) reads of either.
type record interface {
	recordstore.Record
	recordName() string
}

func (v Volume) recordName() string   { return v.Name }
func (s Snapshot) recordName() string { return s.Name }

// volumeStore and snapshotStore are the two stores of a pool.
func volumeStore(dir string) (*recordstore.Store[Volume], error) {
	return recordstore.Open(recordstore.Config[Volume]{
		Dir: dir, Kind: "volume", Version: recordVersion, Valid: validID,
		NotFound: ErrNotFound, Exists: ErrAlreadyExists,
		// The provisioned total, kept so that Capacity adds no scan.
		Weight: func(v Volume) int64 { return v.CapacityBytes },
	})
}

func snapshotStore(dir string) (*recordstore.Store[Snapshot], error) {
	return recordstore.Open(recordstore.Config[Snapshot]{
		Dir: dir, Kind: "snapshot", Version: recordVersion, Valid: validSnapshotID,
		NotFound: ErrSnapshotNotFound, Exists: ErrAlreadyExists,
	})
}

// imagePath and tmpImagePath name a volume's or snapshot's image in dir
// (volumes/ or snapshots/): <id>.img, and .tmp-<id>.img while an
// operation is in progress.
func imagePath(dir, id string) string    { return dir + "/" + id + imgSuffix }
func tmpImagePath(dir, id string) string { return dir + "/" + tmpPrefix + id + imgSuffix }

func (p *Pool) imagePath(id string) string    { return imagePath(p.vdir, id) }
func (p *Pool) tmpImagePath(id string) string { return tmpImagePath(p.vdir, id) }
