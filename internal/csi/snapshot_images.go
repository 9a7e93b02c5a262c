package csi

import (
	"errors"
	"fmt"
	"os"

	"github.com/filevol/filevol/internal/cbt"
	"github.com/filevol/filevol/internal/hostos/extents"
	"github.com/filevol/filevol/internal/volume"
)

// snapshotImager is a store whose snapshots are image files (*pool.Pool).
// A directory pool's snapshots are btrfs subvolumes: files, not blocks.
type snapshotImager interface {
	SnapshotImagePath(id string) string
}

// snapshotImage is a snapshot's image, open for the SnapshotMetadata
// service. Held open, it stays readable to the end of the stream even if
// the snapshot is deleted meanwhile: a delta never mixes two images.
type snapshotImage struct {
	*os.File
	snap volume.Snapshot
	size int64
}

// openSnapshotImage finds the snapshot id in the store that holds it and
// opens its image. An unknown or deleted snapshot is NOT_FOUND; one of a
// directory volume FAILED_PRECONDITION: it has no blocks to describe, and
// the spec's recovery for a snapshot without changed-block tracking is
// the one that applies: a full backup (of its files).
func (s *ControllerService) openSnapshotImage(id string) (*snapshotImage, error) {
	st, snap, err := s.storedSnapshot(id)
	if err != nil {
		return nil, err
	}
	// The kind of the store that holds the snapshot says whether it has
	// blocks to describe.
	imager, ok := st.VolumeStore.(snapshotImager)
	if t := st.Traits(); !ok || !t.Block {
		return nil, failedPrecondition("snapshot %s is of %s %s, which has no blocks: back up its files instead",
			id, t.Noun, snap.SourceVolumeID)
	}
	f, err := os.Open(imager.SnapshotImagePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: snapshot %s was deleted", volume.ErrSnapshotNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &snapshotImage{File: f, snap: snap, size: fi.Size()}, nil
}

// extents maps the image; ok false where the filesystem cannot.
func (img *snapshotImage) extents() ([]extents.Extent, bool, error) {
	es, err := extents.MapSynced(int(img.Fd()))
	if errors.Is(err, extents.ErrUnsupported) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("map the extents of snapshot %s: %w", img.snap.ID, err)
	}
	return es, true, nil
}

// allocated is the image's data ranges; where its extents cannot be
// known, all of it (a backup then reads it whole, as it would anyway).
func (img *snapshotImage) allocated() ([]cbt.Range, error) {
	es, ok, err := img.extents()
	if err != nil || !ok {
		return []cbt.Range{{Offset: 0, Length: img.size}}, err
	}
	return cbt.Allocated(es, img.size), nil
}

// mapDelta is the delta from the extent maps, when both images are
// reflinks (ok false: compare the data). A copy shares nothing with its
// source, so its map would report every data block as changed.
func mapDelta(base, target *snapshotImage) ([]cbt.Range, bool, error) {
	if base.snap.Engine != volume.EngineReflink || target.snap.Engine != volume.EngineReflink {
		return nil, false, nil
	}
	be, ok, err := base.extents()
	if err != nil || !ok {
		return nil, false, err
	}
	te, ok, err := target.extents()
	if err != nil || !ok {
		return nil, false, err
	}
	return cbt.Delta(be, te, base.size, target.size), true, nil
}

// dataCandidates is where a data comparison must look: where either
// image holds data (holes in both read as zeros in both).
func dataCandidates(base, target *snapshotImage) ([]cbt.Range, error) {
	b, err := base.allocated()
	if err != nil {
		return nil, err
	}
	t, err := target.allocated()
	if err != nil {
		return nil, err
	}
	return cbt.Union(b, t), nil
}
