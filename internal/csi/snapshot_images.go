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

// allocated passes the image's data ranges to add, walking its extent
// map a batch at a time; where its extents cannot be known, all of it (a
// backup then reads it whole, as it would anyway). The filesystem says
// so at its first FIEMAP, before any range was passed.
func (img *snapshotImage) allocated(add func(cbt.Range) error) error {
	err := cbt.Allocated(extents.WalkSynced(int(img.Fd())), img.size, add)
	switch {
	case errors.Is(err, extents.ErrUnsupported):
		return add(cbt.Range{Offset: 0, Length: img.size})
	case err != nil:
		return fmt.Errorf("map the extents of snapshot %s: %w", img.snap.ID, err)
	}
	return nil
}

// mapDelta passes the delta from the extent maps to add, when both images
// are reflinks (ok false: compare the data, nothing was passed). A copy
// shares nothing with its source, so its map would report every data
// block as changed. Both maps are walked side by side, a batch at a
// time: memory does not grow with the number of extents.
func mapDelta(base, target *snapshotImage, add func(cbt.Range) error) (bool, error) {
	if base.snap.Engine != volume.EngineReflink || target.snap.Engine != volume.EngineReflink {
		return false, nil
	}
	err := cbt.Delta(extents.WalkSynced(int(base.Fd())), extents.WalkSynced(int(target.Fd())), base.size, target.size, add)
	switch {
	case errors.Is(err, extents.ErrUnsupported):
		// Both maps are first asked for at offset 0, before any range.
		return false, nil
	case err != nil:
		return true, fmt.Errorf("compare the extents of snapshots %s and %s: %w", base.snap.ID, target.snap.ID, err)
	}
	return true, nil
}

// dataCandidates is where a data comparison must look: where either
// image holds data (holes in both read as zeros in both).
func dataCandidates(base, target *snapshotImage) ([]cbt.Range, error) {
	var b, t []cbt.Range
	if err := base.allocated(cbt.Collect(&b)); err != nil {
		return nil, err
	}
	if err := target.allocated(cbt.Collect(&t)); err != nil {
		return nil, err
	}
	return cbt.Union(b, t), nil
}
