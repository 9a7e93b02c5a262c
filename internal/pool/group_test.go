package pool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/volume"
)

// A group's members are visible only while its record is and no delete
// of it has begun; the members of a group never committed are leftovers
// the sweep may drop once old, and never those of a committed group.
func TestGroupRecordGovernsItsMembers(t *testing.T) {
	p := openPool(t, t.TempDir(), Options{NodeID: "n"})
	ctx := context.Background()
	a := mustCreate(t, p, volume.CreateRequest{Name: "a", CapacityBytes: 1 << 20})
	b := mustCreate(t, p, volume.CreateRequest{Name: "b", CapacityBytes: 1 << 20})
	gid := p.GroupSnapshotID("g")
	var ids []string
	for _, v := range []volume.Volume{a, b} {
		s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: volume.GroupMemberName(gid, v.ID), SourceVolumeID: v.ID, GroupSnapshotID: gid})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	if n := len(p.ListSnapshots()); n != 0 {
		t.Errorf("%d members of an uncommitted group listed", n)
	}
	if _, err := p.GetSnapshot(ids[0]); !errors.Is(err, volume.ErrSnapshotNotFound) {
		t.Errorf("GetSnapshot of an uncommitted member = %v", err)
	}
	if got := p.GroupLeftovers(time.Hour); len(got) != 0 {
		t.Errorf("fresh members taken for leftovers: %v", got)
	}
	if got := p.GroupLeftovers(0); len(got) != 2 {
		t.Errorf("GroupLeftovers(0) = %v, want both members", got)
	}

	g := volume.GroupSnapshot{ID: gid, Name: "g", SourceVolumeIDs: []string{a.ID, b.ID}, SnapshotIDs: ids, Node: "n", CreatedAt: time.Now()}
	if err := p.CommitGroupSnapshot(g); err != nil {
		t.Fatal(err)
	}
	if err := p.CommitGroupSnapshot(g); !errors.Is(err, volume.ErrAlreadyExists) {
		t.Errorf("second commit = %v, want ErrAlreadyExists", err)
	}
	if n := len(p.ListSnapshots()); n != 2 {
		t.Errorf("%d members listed after the commit, want 2", n)
	}
	if got := p.GroupLeftovers(0); len(got) != 0 {
		t.Errorf("members of a committed group taken for leftovers: %v", got)
	}
	if dropped, err := p.DropGroupLeftover(ctx, ids[0], 0); dropped || err != nil {
		t.Errorf("DropGroupLeftover of a committed member = %v, %v", dropped, err)
	}
	if err := p.DeleteSnapshot(ctx, ids[0]); !errors.Is(err, volume.ErrInGroup) {
		t.Errorf("DeleteSnapshot of a member = %v, want ErrInGroup", err)
	}

	// Reopened: the group and its members are read back from disk.
	dir := p.Dir()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openPool(t, dir, Options{NodeID: "n"})
	got, err := p.GetGroupSnapshot(gid)
	if err != nil || len(got.SnapshotIDs) != 2 {
		t.Fatalf("group after reopen = %+v, %v", got, err)
	}

	if _, err := p.BeginGroupDelete(gid); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetGroupSnapshot(gid); !errors.Is(err, volume.ErrGroupNotFound) {
		t.Errorf("GetGroupSnapshot of a group being deleted = %v", err)
	}
	if n := len(p.ListSnapshots()); n != 0 {
		t.Errorf("%d members of a group being deleted listed", n)
	}
	for _, id := range ids {
		if err := p.DeleteSnapshot(ctx, id); err != nil {
			t.Errorf("delete a member of a group being deleted: %v", err)
		}
	}
	if err := p.ForgetGroupSnapshot(gid); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RawGroupSnapshot(gid); !errors.Is(err, volume.ErrGroupNotFound) {
		t.Errorf("group record after Forget: %v", err)
	}
}
