package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/filevol/filevol/internal/freeze"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// GroupStore is what a group snapshot asks of a pool besides its
// snapshots: the group records (pool/group.go). *pool.Pool implements it;
// a store that does not (a directory pool) takes no group snapshot.
type GroupStore interface {
	GroupSnapshotID(name string) string
	GetGroupSnapshot(id string) (volume.GroupSnapshot, error)
	RawGroupSnapshot(id string) (volume.GroupSnapshot, error)
	CommitGroupSnapshot(g volume.GroupSnapshot) error
	BeginGroupDelete(id string) (volume.GroupSnapshot, error)
	ForgetGroupSnapshot(id string) error
	GroupMembers(id string) []string
	DeleteGroupMembers(ctx context.Context, gid string, ids []string) error
}

// groupSourceStore returns the one store that holds every source volume,
// which must take group snapshots. Volumes of several pools (of several
// nodes: each node-local pool is its node's), or of a kind without
// groups, cannot be frozen and cut together: FAILED_PRECONDITION (CSI:
// "Cannot snapshot multiple volumes together"), naming them.
func (s *ControllerService) groupSourceStore(srcs []string) (*poolStore, GroupStore, error) {
	var st *poolStore
	for _, id := range srcs {
		if err := checkVolumeID(id); err != nil {
			return nil, nil, notFound("source volume %q does not exist", truncate(id))
		}
		one, err := s.stores.volume(id)
		if err != nil {
			return nil, nil, failedPrecondition("source volume %s is not in a pool this controller (node %s) serves: a group snapshot's volumes must all be in one pool, on one node (%v)",
				truncate(id), s.cfg.NodeID, err)
		}
		if st != nil && one != st {
			return nil, nil, failedPrecondition("source volumes %s and %s are in different pools (%s, %s): a group snapshot freezes and clones its volumes in one pool, on one node",
				srcs[0], id, st.Dir(), one.Dir())
		}
		st = one
	}
	gs, ok := st.VolumeStore.(GroupStore)
	if !ok {
		return nil, nil, failedPrecondition("source volume %s is of a kind whose volumes cannot be snapshotted in a group (directory volumes): group snapshots are of image volumes, their filesystems frozen together", srcs[0])
	}
	return st, gs, nil
}

// groupStoreOf routes a group snapshot ID to the store of its pool, as a
// snapshot ID is routed.
func (s *ControllerService) groupStoreOf(id string) (*poolStore, GroupStore, error) {
	g, err := volid.ParseGroupSnapshot(id)
	if err != nil {
		return nil, nil, err
	}
	st, ok := s.stores.bySnapshot[g.Pool]
	if !ok {
		return nil, nil, fmt.Errorf("%w: group snapshot %s is in pool %s, which this filevol does not serve (it serves %s)",
			volume.ErrGroupNotFound, truncate(id), g.Pool, s.stores.served())
	}
	gs, ok := st.VolumeStore.(GroupStore)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", volume.ErrGroupNotFound, truncate(id))
	}
	return st, gs, nil
}

// freezeTargets are the filesystems to freeze for a group: every source
// volume's, on the node that has it staged. A group's volumes must be on
// one node, and none may be written as a raw block device, which nothing
// can freeze: its clone would not be consistent with the others'.
func freezeTargets(st *poolStore, srcs []string) ([]freeze.Target, error) {
	var targets []freeze.Target
	node := ""
	for _, id := range srcs {
		staged, err := st.inuse.Of(id)
		if err != nil {
			return nil, err
		}
		for _, e := range staged {
			if e.Block && !e.ReadOnly {
				return nil, failedPrecondition("source volume %s is in use as a raw block device on node %s, which cannot be frozen: its clone could not be consistent with the others of the group; snapshot it alone, or unstage it first",
					id, e.Node)
			}
			if node != "" && e.Node != node {
				return nil, failedPrecondition("source volumes of the group are in use on nodes %s and %s (volume %s): a group snapshot freezes its volumes on one node",
					node, e.Node, id)
			}
			node = e.Node
			if !e.Block {
				targets = append(targets, freeze.Target{VolumeID: id, Node: e.Node})
			}
		}
	}
	return targets, nil
}

// cutMembers clones every source volume into a member snapshot of group
// gid while the freezer holds every target frozen: the clones run side by
// side (a reflink is a metadata copy; their fsyncs share the directory's).
// On an error, members already cut are deleted again.
func cutMembers(ctx context.Context, st *poolStore, gs GroupStore, gid string, srcs []string, params map[string]string, secrets volume.Secrets, targets []freeze.Target) ([]volume.Snapshot, error) {
	snaps := make([]volume.Snapshot, len(srcs))
	err := st.freezer.HoldAll(ctx, targets, func() error {
		errs := make([]error, len(srcs))
		var wg sync.WaitGroup
		for i, src := range srcs {
			wg.Go(func() {
				snaps[i], errs[i] = st.CreateSnapshot(ctx, volume.SnapshotRequest{
					Name: volume.GroupMemberName(gid, src), SourceVolumeID: src, Parameters: params, GroupSnapshotID: gid, Secrets: secrets})
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		var ids []string
		for _, sn := range snaps {
			if sn.ID != "" {
				ids = append(ids, sn.ID)
			}
		}
		return nil, errors.Join(fmt.Errorf("group snapshot %s: %w", gid, err), gs.DeleteGroupMembers(ctx, gid, ids))
	}
	return snaps, nil
}

// clearGroup removes what an interrupted create or delete of group gid
// left: the members of a group never committed (those of srcs, which
// their names fix, and any the index knows), and a group whose delete
// began. A committed group is not touched.
func clearGroup(ctx context.Context, st *poolStore, gs GroupStore, gid string, srcs []string) error {
	g, err := gs.RawGroupSnapshot(gid)
	switch {
	case err == nil && !g.Deleting:
		return nil
	case err != nil && !errors.Is(err, volume.ErrGroupNotFound):
		return err
	}
	ids := gs.GroupMembers(gid)
	ids = append(ids, g.SnapshotIDs...)
	for _, src := range srcs {
		ids = append(ids, st.SnapshotID(volume.GroupMemberName(gid, src)))
	}
	slices.Sort(ids)
	if err := gs.DeleteGroupMembers(ctx, gid, slices.Compact(ids)); err != nil {
		return err
	}
	if g.Deleting {
		return gs.ForgetGroupSnapshot(gid)
	}
	return nil
}

// sameIDs reports whether a and b hold the same IDs, in any order.
func sameIDs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkSourceList refuses an empty list, an empty ID and a volume named
// twice (it would be frozen, and cut, twice).
func checkSourceList(srcs []string) error {
	if len(srcs) == 0 {
		return invalidArgument("source volume IDs are missing")
	}
	seen := map[string]bool{}
	for _, id := range srcs {
		if id == "" {
			return invalidArgument("a source volume ID is empty")
		}
		if seen[id] {
			return invalidArgument("source volume %s is named twice", truncate(id))
		}
		seen[id] = true
	}
	return nil
}

// groupMetaPrefixes are the parameters csi-snapshotter adds to a group
// snapshot with --extra-create-metadata; recorded, never interpreted.
var groupMetaPrefixes = []string{
	kubernetesMetaPrefix + "volumegroupsnapshot/",
	kubernetesMetaPrefix + "volumegroupsnapshotcontent/",
}

// suiteDeletionPolicy is the one parameter accepted besides the metadata:
// Kubernetes' External Storage suite (v1.36, volume_group_snapshottable.go)
// copies the class's deletionPolicy field into its parameters too, so its
// group tests could not run otherwise. It duplicates the class's own
// field, which Kubernetes acts on; filevol has nothing to do with it, and
// takes only the values that field can have.
const suiteDeletionPolicy = "deletionPolicy"

func checkGroupParameters(params map[string]string) error {
	if v, ok := params[suiteDeletionPolicy]; ok {
		if v != "Delete" && v != "Retain" {
			return invalidArgument("group snapshot parameter %q = %q: only the VolumeGroupSnapshotClass's own deletionPolicy, Delete or Retain, is accepted there", suiteDeletionPolicy, truncate(v))
		}
		params = maps.Clone(params)
		delete(params, suiteDeletionPolicy)
	}
	return checkMetadataOnly(params, groupMetaPrefixes, "group snapshot", "VolumeGroupSnapshotClass")
}
