package csi

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/cbt"
)

// SnapshotMetadataService implements the CSI SnapshotMetadata service:
// changed-block tracking for backups that copy only what a volume holds,
// or what changed since the last backup. It answers from the snapshot
// images in the controller's pools (snapshot_images.go): on reflink pools
// from their extent maps, never from their data; where snapshots are
// copies by comparing the data (internal/cbt says what each costs).
//
// Both calls stream VARIABLE_LENGTH ranges (an image's extents are of
// any length; FIXED_LENGTH would cut them into as many tuples as blocks),
// max_results at most per message (cbt.DefaultPage when 0), starting at
// starting_offset, and always at least one message, which carries the
// volume's capacity even when no range does.
type SnapshotMetadataService struct {
	csipb.UnimplementedSnapshotMetadataServer
	c *ControllerService
}

// GetMetadataAllocated streams the ranges the snapshot holds data in.
func (s *SnapshotMetadataService) GetMetadataAllocated(req *csipb.GetMetadataAllocatedRequest, stream csipb.SnapshotMetadata_GetMetadataAllocatedServer) error {
	if req.GetSnapshotId() == "" {
		return invalidArgument("snapshot_id is missing")
	}
	if err := checkPaging(req.GetStartingOffset(), req.GetMaxResults()); err != nil {
		return err
	}
	img, err := s.c.openSnapshotImage(req.GetSnapshotId())
	if err != nil {
		return err
	}
	defer img.Close()
	if err := checkOffset(req.GetStartingOffset(), img); err != nil {
		return err
	}
	pager := &cbt.Pager{From: req.GetStartingOffset(), Max: int(req.GetMaxResults()), Send: func(rs []cbt.Range) error {
		return stream.Send(&csipb.GetMetadataAllocatedResponse{BlockMetadataType: csipb.BlockMetadataType_VARIABLE_LENGTH,
			VolumeCapacityBytes: img.size, BlockMetadata: blockMetadata(rs)})
	}}
	if err := img.allocated(pager.Add); err != nil {
		return err
	}
	return pager.Close()
}

// GetMetadataDelta streams the ranges where the target snapshot may hold
// other bytes than the base: every range that differs is in it; a block
// rewritten with the same bytes may be too.
func (s *SnapshotMetadataService) GetMetadataDelta(req *csipb.GetMetadataDeltaRequest, stream csipb.SnapshotMetadata_GetMetadataDeltaServer) error {
	if req.GetBaseSnapshotId() == "" || req.GetTargetSnapshotId() == "" {
		return invalidArgument("base_snapshot_id and target_snapshot_id are required")
	}
	if err := checkPaging(req.GetStartingOffset(), req.GetMaxResults()); err != nil {
		return err
	}
	base, err := s.c.openSnapshotImage(req.GetBaseSnapshotId())
	if err != nil {
		return err
	}
	defer base.Close()
	target, err := s.c.openSnapshotImage(req.GetTargetSnapshotId())
	if err != nil {
		return err
	}
	defer target.Close()
	if err := checkPair(base, target); err != nil {
		return err
	}
	if err := checkOffset(req.GetStartingOffset(), target); err != nil {
		return err
	}
	pager := &cbt.Pager{From: req.GetStartingOffset(), Max: int(req.GetMaxResults()), Send: func(rs []cbt.Range) error {
		return stream.Send(&csipb.GetMetadataDeltaResponse{BlockMetadataType: csipb.BlockMetadataType_VARIABLE_LENGTH,
			VolumeCapacityBytes: target.size, BlockMetadata: blockMetadata(rs)})
	}}
	if ok, err := mapDelta(base, target, pager.Add); err != nil {
		return err
	} else if ok {
		return pager.Close()
	}
	// Copies share no extent: only their bytes tell.
	candidates, err := dataCandidates(base, target)
	if err != nil {
		return err
	}
	read, err := cbt.CompareData(stream.Context(), base.File, target.File, base.size, target.size, candidates, req.GetStartingOffset(), pager.Add)
	klog.V(3).InfoS("Snapshot delta by data comparison", "base", base.snap.ID, "target", target.snap.ID, "bytesRead", read)
	if err != nil {
		return err
	}
	return pager.Close()
}

// checkPaging refuses what no stream can honour. The spec names a
// negative starting_offset OUT_OF_RANGE, like one past the end.
func checkPaging(from int64, maxResults int32) error {
	if from < 0 {
		return outOfRange("starting_offset %d is negative", from)
	}
	if maxResults < 0 {
		return invalidArgument("max_results %d is negative", maxResults)
	}
	return nil
}

// checkOffset: starting_offset may be the capacity (nothing follows it),
// not past it.
func checkOffset(from int64, img *snapshotImage) error {
	if from > img.size {
		return outOfRange("starting_offset %d is past the end of snapshot %s (%d bytes)", from, img.snap.ID, img.size)
	}
	return nil
}

// checkPair: the spec's target is "a second snapshot in the same volume,
// created after the base snapshot"; a pair that is not is an invalid
// argument (the caller swaps or picks another), not a missing snapshot.
// The same snapshot twice is a pair with nothing changed.
func checkPair(base, target *snapshotImage) error {
	if base.snap.SourceVolumeID != target.snap.SourceVolumeID {
		return invalidArgument("snapshots %s and %s are of different volumes (%s, %s): a delta is between two snapshots of one volume",
			base.snap.ID, target.snap.ID, base.snap.SourceVolumeID, target.snap.SourceVolumeID)
	}
	if base.snap.CreatedAt.After(target.snap.CreatedAt) {
		return invalidArgument("base snapshot %s (%s) is newer than target snapshot %s (%s): swap them",
			base.snap.ID, base.snap.CreatedAt.Format("2006-01-02T15:04:05.000Z07:00"), target.snap.ID, target.snap.CreatedAt.Format("2006-01-02T15:04:05.000Z07:00"))
	}
	return nil
}

func blockMetadata(rs []cbt.Range) []*csipb.BlockMetadata {
	out := make([]*csipb.BlockMetadata, len(rs))
	for i, r := range rs {
		out[i] = &csipb.BlockMetadata{ByteOffset: r.Offset, SizeBytes: r.Length}
	}
	return out
}
