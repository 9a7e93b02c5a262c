package csi

import (
	"context"
	"errors"
	"maps"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// snapshotMetaPrefixes are the CreateSnapshot parameters csi-snapshotter
// adds with --extra-create-metadata; recorded, never interpreted. filevol
// has no snapshot parameter of its own, so anything else is refused.
var snapshotMetaPrefixes = []string{
	kubernetesMetaPrefix + "volumesnapshot/",
	kubernetesMetaPrefix + "volumesnapshotcontent/",
}

func checkSnapshotParameters(params map[string]string) error {
	return checkMetadataOnly(params, snapshotMetaPrefixes, "snapshot", "VolumeSnapshotClass")
}

// checkMetadataOnly refuses every parameter but the metadata the sidecar
// adds under prefixes: what names the call, class the Kubernetes class
// whose parameters the user would have to fix.
func checkMetadataOnly(params map[string]string, prefixes []string, what, class string) error {
	for k := range params {
		known := false
		for _, p := range prefixes {
			known = known || strings.HasPrefix(k, p)
		}
		if !known {
			return invalidArgument("unknown %s parameter %q (filevol takes none; the %s must not set parameters)", what, truncate(k), class)
		}
	}
	return nil
}

// CreateSnapshot cuts a snapshot of a volume into an independent image
// (reflink, else a hole-preserving copy). When the volume is staged here
// with a filesystem, that filesystem is frozen around the clone, so the
// snapshot is filesystem-consistent, and always thawed. It is
// idempotent by name (spec: same name and source → the same snapshot;
// another source → ALREADY_EXISTS) and ready_to_use when it returns.
func (s *ControllerService) CreateSnapshot(ctx context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	name, src := req.GetName(), req.GetSourceVolumeId()
	if err := checkName("snapshot", name); err != nil {
		return nil, err
	}
	if src == "" {
		return nil, invalidArgument("source volume ID is missing")
	}
	if err := checkSnapshotParameters(req.GetParameters()); err != nil {
		return nil, err
	}
	if err := s.checkAccessible(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}
	// A retry of a finished snapshot is answered from its record, without
	// freezing the volume again.
	if snap, err := s.snapshotByName(name); err == nil {
		if snap.SourceVolumeID != src {
			return nil, alreadyExists("snapshot %q already exists, of volume %s, not %s", name, snap.SourceVolumeID, truncate(src))
		}
		return &csipb.CreateSnapshotResponse{Snapshot: s.csiSnapshot(snap)}, nil
	}
	if validVolumeID(src) != nil {
		return nil, notFound("source volume %q does not exist", truncate(src))
	}
	st, err := s.stores.volume(src)
	if err != nil {
		return nil, err
	}
	id := st.SnapshotID(name)
	// Both: a second snapshot of this name, and anything else on the
	// source (unstage above all: unmounting a frozen filesystem leaves it
	// frozen), wait for this one.
	unlock, err := s.locks.tryLock(id, src)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := st.Get(src); err != nil {
		if errors.Is(err, volume.ErrNotFound) {
			return nil, notFound("source volume %s is not in the pool of node %s", src, s.cfg.NodeID)
		}
		return nil, err
	}
	var snap volume.Snapshot
	err = s.withFrozen(ctx, st, src, func() (err error) {
		snap, err = st.CreateSnapshot(ctx, volume.SnapshotRequest{Name: name, SourceVolumeID: src, Parameters: req.GetParameters(), Secrets: req.GetSecrets()})
		return err
	})
	if err != nil {
		return nil, err
	}
	klog.InfoS("snapshot created", "snapshotID", snap.ID, "name", name, "sourceVolumeID", src, "bytes", snap.SizeBytes, "engine", snap.Engine)
	return &csipb.CreateSnapshotResponse{Snapshot: s.answeredTopology(s.csiSnapshot(snap), req.GetAccessibilityRequirements())}, nil
}

// answeredTopology drops the snapshot's accessible_topology from a
// CreateSnapshot response when the CO required exactly that one topology
// (checkAccessible accepted it): the CO's own requirement already says
// where the snapshot is usable, and nothing is lost. csi-test v5.6.0's
// "snapshot with accessibility requirements" spec compares the topology
// it sent with the one returned using reflect.DeepEqual, which also
// compares protobuf's internal size cache (set on the message it sent,
// zero on the one it received): any topology returned there fails it.
// Every other answer (ListSnapshots, GetSnapshot, group snapshots, a
// CreateSnapshot without requirements) carries the topology.
func (s *ControllerService) answeredTopology(snap *csipb.Snapshot, tr *csipb.TopologyRequirement) *csipb.Snapshot {
	if req := tr.GetRequisite(); len(req) == 1 && maps.Equal(req[0].GetSegments(), s.cfg.topology().GetSegments()) {
		snap.AccessibleTopology = nil
	}
	return snap
}

// DeleteSnapshot removes the snapshot's image and record; the source
// volume is not touched. A missing snapshot is success (spec).
func (s *ControllerService) DeleteSnapshot(ctx context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, invalidArgument("snapshot ID is missing")
	}
	st, err := s.stores.snapshot(id)
	if err != nil {
		// Malformed, or in a pool this controller does not serve: no
		// snapshot here has it (spec: MUST succeed).
		return &csipb.DeleteSnapshotResponse{}, nil
	}
	// A restore from this snapshot holds the same key.
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := st.DeleteSnapshot(ctx, id); err != nil {
		return nil, err
	}
	klog.InfoS("snapshot deleted", "snapshotID", id)
	return &csipb.DeleteSnapshotResponse{}, nil
}

// ListSnapshots pages through the snapshots in ID order, filtered by
// snapshot ID and by source volume. As in ListVolumes the token is the
// last ID of the previous page.
func (s *ControllerService) ListSnapshots(ctx context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	var snaps []volume.Snapshot
	if id := req.GetSnapshotId(); id != "" {
		// From disk: a lookup by ID must not miss a snapshot another
		// process sharing the pool just made.
		st, err := s.stores.snapshot(id)
		var snap volume.Snapshot
		if err == nil {
			snap, err = st.GetSnapshot(id)
		}
		switch {
		case err == nil:
			snaps = []volume.Snapshot{snap}
		case !errors.Is(err, volume.ErrSnapshotNotFound) && !errors.Is(err, volume.ErrInvalidID) && !errors.Is(err, volid.ErrInvalid):
			return nil, err
		}
	} else {
		snaps = s.listSnapshots()
	}
	var ofSource func(volume.Snapshot) bool
	if vid := req.GetSourceVolumeId(); vid != "" {
		ofSource = func(s volume.Snapshot) bool { return s.SourceVolumeID == vid }
	}
	page := pageRequest{token: req.GetStartingToken(), max: req.GetMaxEntries(), validToken: validSnapshotID}
	snaps, next, err := paginate(page, snaps, func(s volume.Snapshot) string { return s.ID }, ofSource)
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListSnapshotsResponse{NextToken: next, Entries: make([]*csipb.ListSnapshotsResponse_Entry, 0, len(snaps))}
	for _, snap := range snaps {
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: s.csiSnapshot(snap)})
	}
	return resp, nil
}

// GetSnapshot returns one snapshot (GET_SNAPSHOT); NOT_FOUND when gone.
func (s *ControllerService) GetSnapshot(ctx context.Context, req *csipb.GetSnapshotRequest) (*csipb.GetSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, invalidArgument("snapshot ID is missing")
	}
	_, snap, err := s.storedSnapshot(id)
	if err != nil {
		return nil, err
	}
	return &csipb.GetSnapshotResponse{Snapshot: s.csiSnapshot(snap)}, nil
}

// csiSnapshot is the CSI view of a record. filevol does no post-cut
// processing, so a snapshot that exists is ready to use. Its image lives
// in this pool, so it is usable where the pool's volumes are: this node
// (a node-local pool) or the nodes that mount the pool (a shared one);
// SNAPSHOT_ACCESSIBILITY_CONSTRAINTS tells the CO to read it.
func (s *ControllerService) csiSnapshot(snap volume.Snapshot) *csipb.Snapshot {
	return &csipb.Snapshot{
		SnapshotId:         snap.ID,
		SourceVolumeId:     snap.SourceVolumeID,
		SizeBytes:          snap.RestoreSize(),
		CreationTime:       timestamppb.New(snap.CreatedAt),
		ReadyToUse:         true,
		GroupSnapshotId:    snap.GroupSnapshotID,
		AccessibleTopology: []*csipb.Topology{s.cfg.topology()},
	}
}
