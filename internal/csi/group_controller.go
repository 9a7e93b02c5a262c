package csi

import (
	"context"
	"errors"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// GroupControllerService implements the CSI GroupController service:
// crash-consistent snapshots of several volumes of one node. It is the
// controller's: the same stores, locks and freeze requests.
type GroupControllerService struct {
	csipb.UnimplementedGroupControllerServer
	c *ControllerService
}

// GroupControllerGetCapabilities: create, delete and get group snapshots.
func (g *GroupControllerService) GroupControllerGetCapabilities(context.Context, *csipb.GroupControllerGetCapabilitiesRequest) (*csipb.GroupControllerGetCapabilitiesResponse, error) {
	return &csipb.GroupControllerGetCapabilitiesResponse{Capabilities: []*csipb.GroupControllerServiceCapability{{
		Type: &csipb.GroupControllerServiceCapability_Rpc{Rpc: &csipb.GroupControllerServiceCapability_RPC{
			Type: csipb.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT}},
	}}}, nil
}

// CreateVolumeGroupSnapshot freezes every mounted filesystem of the group
// at once (internal/freeze, through the pool, on the node that has them),
// clones every image while all are frozen, thaws them all, and then
// commits the group record, which makes the group and its members
// visible together (spec: write-order consistent, or fail). Idempotent by
// name: the same name and volumes return the group; other volumes are
// ALREADY_EXISTS. A group cut short by a crash is invisible, and this
// call, retried, removes what it left and cuts it whole again.
func (g *GroupControllerService) CreateVolumeGroupSnapshot(ctx context.Context, req *csipb.CreateVolumeGroupSnapshotRequest) (*csipb.CreateVolumeGroupSnapshotResponse, error) {
	name, srcs := req.GetName(), req.GetSourceVolumeIds()
	if err := checkName("group snapshot", name); err != nil {
		return nil, err
	}
	if err := checkSourceList(srcs); err != nil {
		return nil, err
	}
	if err := checkGroupParameters(req.GetParameters()); err != nil {
		return nil, err
	}
	st, gs, err := g.c.groupSourceStore(srcs)
	if err != nil {
		return nil, err
	}
	gid := gs.GroupSnapshotID(name)
	// The group, its sources (an unstage must wait: unmounting a frozen
	// filesystem leaves it frozen) and its members' IDs.
	keys := append([]string{gid}, srcs...)
	for _, src := range srcs {
		keys = append(keys, st.SnapshotID(volume.GroupMemberName(gid, src)))
	}
	unlock, err := g.c.locks.tryLock(keys...)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if grp, err := gs.GetGroupSnapshot(gid); err == nil {
		if !sameIDs(grp.SourceVolumeIDs, srcs) {
			return nil, alreadyExists("group snapshot %q already exists, of volumes %v, not %v", name, grp.SourceVolumeIDs, srcs)
		}
		return g.response(st, grp)
	} else if !errors.Is(err, volume.ErrGroupNotFound) {
		return nil, err
	}
	for _, src := range srcs {
		if _, err := st.Get(src); err != nil {
			if errors.Is(err, volume.ErrNotFound) {
				return nil, notFound("source volume %s is not in the pool of node %s", src, g.c.cfg.NodeID)
			}
			return nil, err
		}
	}
	targets, err := freezeTargets(st, srcs)
	if err != nil {
		return nil, err
	}
	if err := clearGroup(ctx, st, gs, gid, srcs); err != nil {
		return nil, err
	}
	t0 := time.Now()
	snaps, err := cutMembers(ctx, st, gs, gid, srcs, req.GetParameters(), req.GetSecrets(), targets)
	if err != nil {
		return nil, err
	}
	cut := time.Since(t0)
	grp := volume.GroupSnapshot{ID: gid, Name: name, SourceVolumeIDs: srcs, Parameters: req.GetParameters(),
		Node: snaps[0].Node, CreatedAt: snaps[0].CreatedAt}
	for _, sn := range snaps {
		grp.SnapshotIDs = append(grp.SnapshotIDs, sn.ID)
		if sn.CreatedAt.Before(grp.CreatedAt) {
			grp.CreatedAt = sn.CreatedAt
		}
	}
	if err := gs.CommitGroupSnapshot(grp); err != nil {
		return nil, errors.Join(err, gs.DeleteGroupMembers(ctx, gid, grp.SnapshotIDs))
	}
	klog.InfoS("group snapshot created", "groupSnapshotID", gid, "name", name, "volumes", len(srcs),
		"frozen", len(targets), "cut", cut, "total", time.Since(t0))
	return &csipb.CreateVolumeGroupSnapshotResponse{GroupSnapshot: g.csiGroup(grp, snaps)}, nil
}

// DeleteVolumeGroupSnapshot deletes the group and every member. It marks
// the group first (durably), which hides it and frees its members to be
// deleted; a crash in between is finished by the retried call. A missing
// group is success (spec); snapshot_ids, when given, must be the group's
// (INVALID_ARGUMENT otherwise).
func (g *GroupControllerService) DeleteVolumeGroupSnapshot(ctx context.Context, req *csipb.DeleteVolumeGroupSnapshotRequest) (*csipb.DeleteVolumeGroupSnapshotResponse, error) {
	gid := req.GetGroupSnapshotId()
	if gid == "" {
		return nil, invalidArgument("group snapshot ID is missing")
	}
	st, gs, err := g.c.groupStoreOf(gid)
	if err != nil {
		// Malformed, or in a pool this controller does not serve: no group
		// here has it (spec: MUST succeed).
		return &csipb.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	unlock, err := g.c.locks.tryLock(gid)
	if err != nil {
		return nil, err
	}
	defer unlock()
	grp, err := gs.RawGroupSnapshot(gid)
	if err != nil && !errors.Is(err, volume.ErrGroupNotFound) {
		return nil, err
	}
	committed := err == nil && !grp.Deleting
	if committed && len(req.GetSnapshotIds()) > 0 && !sameIDs(grp.SnapshotIDs, req.GetSnapshotIds()) {
		return nil, invalidArgument("group snapshot %s holds snapshots %v, not %v", gid, grp.SnapshotIDs, req.GetSnapshotIds())
	}
	// A restore from a member holds the member's key.
	unlockMembers, err := g.c.locks.tryLock(grp.SnapshotIDs...)
	if err != nil {
		return nil, err
	}
	defer unlockMembers()
	if committed {
		if _, err := gs.BeginGroupDelete(gid); err != nil {
			return nil, err
		}
	}
	if err := clearGroup(ctx, st, gs, gid, nil); err != nil {
		return nil, err
	}
	klog.InfoS("group snapshot deleted", "groupSnapshotID", gid, "members", len(grp.SnapshotIDs))
	return &csipb.DeleteVolumeGroupSnapshotResponse{}, nil
}

// GetVolumeGroupSnapshot returns the group and its members; NOT_FOUND
// when it does not exist (or its delete has begun).
func (g *GroupControllerService) GetVolumeGroupSnapshot(ctx context.Context, req *csipb.GetVolumeGroupSnapshotRequest) (*csipb.GetVolumeGroupSnapshotResponse, error) {
	gid := req.GetGroupSnapshotId()
	if gid == "" {
		return nil, invalidArgument("group snapshot ID is missing")
	}
	st, gs, err := g.c.groupStoreOf(gid)
	if err != nil {
		if errors.Is(err, volid.ErrInvalid) {
			return nil, notFound("group snapshot %q does not exist: %v", truncate(gid), err)
		}
		return nil, err
	}
	grp, err := gs.GetGroupSnapshot(gid)
	if err != nil {
		return nil, err
	}
	if len(req.GetSnapshotIds()) > 0 && !sameIDs(grp.SnapshotIDs, req.GetSnapshotIds()) {
		return nil, invalidArgument("group snapshot %s holds snapshots %v, not %v", gid, grp.SnapshotIDs, req.GetSnapshotIds())
	}
	resp, err := g.response(st, grp)
	if err != nil {
		return nil, err
	}
	return &csipb.GetVolumeGroupSnapshotResponse{GroupSnapshot: resp.GetGroupSnapshot()}, nil
}

// response reads the group's members and answers with the group.
func (g *GroupControllerService) response(st *poolStore, grp volume.GroupSnapshot) (*csipb.CreateVolumeGroupSnapshotResponse, error) {
	snaps := make([]volume.Snapshot, 0, len(grp.SnapshotIDs))
	for _, id := range grp.SnapshotIDs {
		sn, err := st.GetSnapshot(id)
		if err != nil {
			return nil, failedPrecondition("group snapshot %s: its member %s is unreadable (%v); delete the group and take it again", grp.ID, id, err)
		}
		snaps = append(snaps, sn)
	}
	return &csipb.CreateVolumeGroupSnapshotResponse{GroupSnapshot: g.csiGroup(grp, snaps)}, nil
}

// csiGroup is the CSI view of a group; it is ready when it exists, as
// its members are.
func (g *GroupControllerService) csiGroup(grp volume.GroupSnapshot, snaps []volume.Snapshot) *csipb.VolumeGroupSnapshot {
	out := &csipb.VolumeGroupSnapshot{GroupSnapshotId: grp.ID, CreationTime: timestamppb.New(grp.CreatedAt), ReadyToUse: true}
	for _, sn := range snaps {
		out.Snapshots = append(out.Snapshots, g.c.csiSnapshot(sn))
	}
	return out
}
