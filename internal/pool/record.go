package pool

import (
	"strings"

	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volume"
)

// recordVersion is the Version this package writes; the stores refuse to
// read other versions rather than misread them after a downgrade.
const recordVersion = 1

// File names beside the records. Only validated IDs are put into them.
const (
	tmpPrefix = recordstore.TmpPrefix
	imgSuffix = ".img"
)

// record is what the code shared by volumes and snapshots (recover.go,
// delete.go) reads of either.
type record interface {
	recordstore.Record
	RecordName() string
}

// volumeStore and snapshotStore are the two stores of a pool; owner is
// the key that tags their temporary records ("" on a node-local pool).
func volumeStore(dir, owner string) (*recordstore.Store[volume.Volume], error) {
	return recordstore.Open(recordstore.Config[volume.Volume]{
		Dir: dir, Kind: "volume", Version: recordVersion, Valid: validID, Owner: owner,
		NotFound: volume.ErrNotFound, Exists: volume.ErrAlreadyExists,
		// The provisioned total, kept so that Capacity adds no scan.
		Weight: func(v volume.Volume) int64 { return v.CapacityBytes },
	})
}

func snapshotStore(dir, owner string) (*recordstore.Store[volume.Snapshot], error) {
	return recordstore.Open(recordstore.Config[volume.Snapshot]{
		Dir: dir, Kind: "snapshot", Version: recordVersion, Valid: validSnapshotID, Owner: owner,
		NotFound: volume.ErrSnapshotNotFound, Exists: volume.ErrAlreadyExists,
	})
}

// imagePath names a volume's or snapshot's image in dir (volumes/ or
// snapshots/): <id>.img. While an operation is in progress the image is
// tmpImageName(id, tag): .tmp-<id>.img on a node-local pool,
// .tmp-<id>@<owner key>.img on a shared one, where the tag says whose
// operation it is (lock.go).
func imagePath(dir, id string) string { return dir + "/" + id + imgSuffix }

func tmpImageName(id, tag string) string { return tmpPrefix + id + tag + imgSuffix }

// ImageFileID returns the ID of the volume or snapshot whose image, or
// temporary image of any owner, has the file name name; valid checks the
// ID (ValidID, ValidSnapshotID). The one place that reads these names
// back, for the pool's scans and for the node's view of loop devices.
func ImageFileID(name string, valid func(string) error) (id string, tmp bool, ok bool) {
	id, ok = strings.CutSuffix(name, imgSuffix)
	if !ok {
		return "", false, false
	}
	if rest, isTmp := strings.CutPrefix(id, tmpPrefix); isTmp {
		id, _ = recordstore.CutOwner(rest)
		tmp = true
	}
	if valid(id) != nil {
		return "", false, false
	}
	return id, tmp, true
}

// tmpOwner is the owner key of a temporary image's name ("" untagged).
func tmpOwner(name string) string {
	_, owner := recordstore.CutOwner(strings.TrimSuffix(strings.TrimPrefix(name, tmpPrefix), imgSuffix))
	return owner
}

func (p *Pool) imagePath(id string) string        { return imagePath(p.vdir, id) }
func (p *Pool) tmpImagePath(id string) string     { return p.vdir + "/" + tmpImageName(id, p.tag) }
func (p *Pool) snapImagePath(id string) string    { return imagePath(p.sdir, id) }
func (p *Pool) snapTmpImagePath(id string) string { return p.sdir + "/" + tmpImageName(id, p.tag) }
