package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

func groupStore(dir, owner string) (*recordstore.Store[volume.GroupSnapshot], error) {
	return recordstore.Open(recordstore.Config[volume.GroupSnapshot]{
		Dir: dir, Kind: "group snapshot", Version: recordVersion, Valid: validGroupID, Owner: owner,
		NotFound: volume.ErrGroupNotFound, Exists: volume.ErrAlreadyExists,
	})
}

// GroupSnapshotID returns the ID that a group snapshot named name has.
func (p *Pool) GroupSnapshotID(name string) string { return volid.NewGroupSnapshot(p.ident.ID, name) }

// GetGroupSnapshot reads the group's record from disk; ErrGroupNotFound
// when there is none or its delete has begun.
func (p *Pool) GetGroupSnapshot(id string) (volume.GroupSnapshot, error) {
	g, err := p.groups.Get(id)
	if err != nil {
		return volume.GroupSnapshot{}, err
	}
	if g.Deleting {
		return volume.GroupSnapshot{}, fmt.Errorf("%w: %s is being deleted", volume.ErrGroupNotFound, id)
	}
	return cloneGroup(g), nil
}

// RawGroupSnapshot reads the group's record whatever its state, for a
// create or delete that must finish a delete begun before.
func (p *Pool) RawGroupSnapshot(id string) (volume.GroupSnapshot, error) {
	g, err := p.groups.Get(id)
	return cloneGroup(g), err
}

// CommitGroupSnapshot makes the group g visible, members and all, in one
// durable step: its record, written beside no other (a group of that ID
// already there is ErrAlreadyExists). Every member's record must be
// durable already (CreateSnapshot returns once it is).
func (p *Pool) CommitGroupSnapshot(g volume.GroupSnapshot) error {
	if err := validName(g.Name); err != nil {
		return err
	}
	if len(g.SnapshotIDs) != len(g.SourceVolumeIDs) || len(g.SnapshotIDs) == 0 {
		return fmt.Errorf("%w: group %s has %d members for %d volumes", volume.ErrInvalidArgument, g.ID, len(g.SnapshotIDs), len(g.SourceVolumeIDs))
	}
	g.Version = recordVersion
	g = cloneGroup(g)
	draft, err := p.groups.Prepare(g)
	if err != nil {
		return wrapNoSpace(err)
	}
	if err := draft.Commit(); err != nil {
		draft.Abandon()
		return err
	}
	if err := draft.Durable(); err != nil {
		draft.Abandon()
		return wrapNoSpace(err)
	}
	return nil
}

// BeginGroupDelete marks the group as being deleted, durably, and returns
// its record: from then on neither it nor its members are visible, and
// its members may be deleted one by one. A group already marked is
// returned as it is; ErrGroupNotFound when there is no record.
func (p *Pool) BeginGroupDelete(id string) (volume.GroupSnapshot, error) {
	g, err := p.groups.Get(id)
	if err != nil {
		return volume.GroupSnapshot{}, err
	}
	if !g.Deleting {
		g = cloneGroup(g)
		g.Deleting = true
		if err := p.groups.Replace(g); err != nil {
			return volume.GroupSnapshot{}, wrapNoSpace(err)
		}
	}
	return cloneGroup(g), nil
}

// ForgetGroupSnapshot removes the group's record, durably: the last step
// of a delete, once its members are gone. A missing record is no error.
func (p *Pool) ForgetGroupSnapshot(id string) error {
	if err := validGroupID(id); err != nil {
		return err
	}
	m := p.groups.Mark()
	if err := p.groups.Remove(id); err != nil {
		return err
	}
	return p.groups.Synced(m)
}

// GroupMembers returns the IDs of the snapshots the index holds whose
// records name the group id, visible or not: what an interrupted create
// or delete left.
func (p *Pool) GroupMembers(id string) []string {
	var out []string
	p.snaps.Each(func(s volume.Snapshot) {
		if s.GroupSnapshotID == id {
			out = append(out, s.ID)
		}
	})
	slices.Sort(out)
	return out
}

// visible reports whether the snapshot s may be shown: a member only
// while its group is committed and not being deleted. The group is read
// from the index, else from disk (another process sharing the pool may
// have committed it).
func (p *Pool) visible(s volume.Snapshot) bool {
	if s.GroupSnapshotID == "" {
		return true
	}
	if g, ok := p.groups.Cached(s.GroupSnapshotID); ok {
		return !g.Deleting
	}
	g, err := p.groups.Get(s.GroupSnapshotID)
	return err == nil && !g.Deleting
}

// inLiveGroup reports whether the snapshot s is a member of a group that
// is committed and not being deleted, read from disk.
func (p *Pool) inLiveGroup(s volume.Snapshot) bool {
	if s.GroupSnapshotID == "" {
		return false
	}
	g, err := p.groups.Get(s.GroupSnapshotID)
	return err == nil && !g.Deleting
}

func cloneGroup(g volume.GroupSnapshot) volume.GroupSnapshot {
	g.SourceVolumeIDs = slices.Clone(g.SourceVolumeIDs)
	g.SnapshotIDs = slices.Clone(g.SnapshotIDs)
	g.Parameters = maps.Clone(g.Parameters)
	return g
}

// GroupLeftovers returns the member snapshots, cut more than age ago, of
// groups that have no record: a create killed between its first member
// and its group record, and never retried (the CO gave up, or the group
// was deleted before it got an ID to delete). Nobody sees them; they only
// hold space.
func (p *Pool) GroupLeftovers(age time.Duration) []string {
	cutoff := time.Now().Add(-age)
	var out []string
	for _, s := range p.snaps.List() {
		if s.GroupSnapshotID == "" || s.CreatedAt.After(cutoff) {
			continue
		}
		if _, err := p.groups.Get(s.GroupSnapshotID); errors.Is(err, volume.ErrGroupNotFound) {
			out = append(out, s.ID)
		}
	}
	return out
}

// DropGroupLeftover deletes the snapshot id if it still is what
// GroupLeftovers found: a member cut more than age ago of a group that
// has no record. The caller holds the snapshot's lock, which a create of
// the group takes too.
func (p *Pool) DropGroupLeftover(ctx context.Context, id string, age time.Duration) (bool, error) {
	s, err := p.getSnapshot(id)
	if err != nil || s.GroupSnapshotID == "" || s.CreatedAt.After(time.Now().Add(-age)) {
		return false, nil
	}
	if _, err := p.groups.Get(s.GroupSnapshotID); !errors.Is(err, volume.ErrGroupNotFound) {
		return false, nil
	}
	return true, p.deleteSnapshot(ctx, id)
}

// DeleteGroupMembers deletes those of ids that are snapshots of group
// gid (by their records; another snapshot under such an ID — a CO's
// that happens to carry a member's name — is left alone). The group must
// not be visible: not committed, or being deleted.
func (p *Pool) DeleteGroupMembers(ctx context.Context, gid string, ids []string) error {
	var errs []error
	for _, id := range ids {
		s, err := p.getSnapshot(id)
		switch {
		case errors.Is(err, volume.ErrSnapshotNotFound):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case s.GroupSnapshotID != gid:
			continue
		}
		errs = append(errs, p.DeleteSnapshot(ctx, id))
	}
	return errors.Join(errs...)
}
