package csi

import (
	"context"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

// groupEnv is a controller on a real pool in a temporary directory, with
// no node: no volume is staged, so nothing is frozen (the freeze itself
// is internal/freeze's, and the real-kernel tests' in test/snapshot).
type groupEnv struct {
	t *testing.T
	p *pool.Pool
	c *ControllerService
	g *GroupControllerService
}

func newGroupEnv(t *testing.T) *groupEnv {
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := newControllerService(Config{NodeID: "n", Controller: true}, p)
	return &groupEnv{t: t, p: p, c: c, g: &GroupControllerService{c: c}}
}

func (e *groupEnv) volumes(names ...string) []string {
	var ids []string
	for _, n := range names {
		r, err := e.c.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{
			Name: n, CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 << 20},
			VolumeCapabilities: []*csipb.VolumeCapability{{
				AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
				AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		})
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, r.GetVolume().GetVolumeId())
	}
	return ids
}

func (e *groupEnv) create(name string, srcs []string) (*csipb.VolumeGroupSnapshot, error) {
	r, err := e.g.CreateVolumeGroupSnapshot(context.Background(), &csipb.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: srcs})
	return r.GetGroupSnapshot(), toStatus(err)
}

func wantGroupCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(toStatus(err)); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

// A group is idempotent by name, its members name it and are ordinary
// snapshots otherwise, a member alone cannot be deleted, and deleting the
// group deletes them all.
func TestGroupSnapshotLifecycle(t *testing.T) {
	e := newGroupEnv(t)
	ctx := context.Background()
	srcs := e.volumes("a", "b", "c")
	grp, err := e.create("g", srcs)
	if err != nil {
		t.Fatal(err)
	}
	if len(grp.GetSnapshots()) != 3 || !grp.GetReadyToUse() || grp.GetCreationTime() == nil {
		t.Fatalf("group = %v", grp)
	}
	var ids []string
	for i, sn := range grp.GetSnapshots() {
		ids = append(ids, sn.GetSnapshotId())
		if sn.GetGroupSnapshotId() != grp.GetGroupSnapshotId() || sn.GetSourceVolumeId() != srcs[i] || !sn.GetReadyToUse() {
			t.Errorf("member %d = %v", i, sn)
		}
		if len(sn.GetAccessibleTopology()) != 1 || sn.GetAccessibleTopology()[0].GetSegments()[TopologyKey] != "n" {
			t.Errorf("member %d topology = %v, want this node's", i, sn.GetAccessibleTopology())
		}
	}
	// Retried, in another order: the same group.
	again, err := e.create("g", []string{srcs[2], srcs[0], srcs[1]})
	if err != nil || again.GetGroupSnapshotId() != grp.GetGroupSnapshotId() || !sameIDs(snapshotIDs(again), ids) {
		t.Errorf("retry = %v, %v; want the same group", again, err)
	}
	_, err = e.create("g", srcs[:2])
	wantGroupCode(t, "same name, other volumes", err, codes.AlreadyExists)

	got, err := e.g.GetVolumeGroupSnapshot(ctx, &csipb.GetVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids})
	if err != nil || len(got.GetGroupSnapshot().GetSnapshots()) != 3 {
		t.Errorf("get = %v, %v", got, err)
	}
	_, err = e.g.GetVolumeGroupSnapshot(ctx, &csipb.GetVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids[:1]})
	wantGroupCode(t, "get with a wrong member list", err, codes.InvalidArgument)
	list, err := e.c.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SnapshotId: ids[1]})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetGroupSnapshotId() != grp.GetGroupSnapshotId() {
		t.Errorf("ListSnapshots of a member = %v, %v", list, err)
	}

	_, err = e.c.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: ids[0]})
	wantGroupCode(t, "delete a member alone", err, codes.InvalidArgument)
	_, err = e.g.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids[1:]})
	wantGroupCode(t, "delete with a wrong member list", err, codes.InvalidArgument)
	for range 2 { // idempotent
		if _, err := e.g.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: ids}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = e.g.GetVolumeGroupSnapshot(ctx, &csipb.GetVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId()})
	wantGroupCode(t, "get a deleted group", err, codes.NotFound)
	if n := len(e.p.ListSnapshots()); n != 0 {
		t.Errorf("%d snapshots left after the group's delete", n)
	}
}

func snapshotIDs(g *csipb.VolumeGroupSnapshot) []string {
	var out []string
	for _, s := range g.GetSnapshots() {
		out = append(out, s.GetSnapshotId())
	}
	return out
}

// A create killed after some members were cut and before the group's
// record: the members are invisible (no half group), and the retried
// create replaces them with a whole group.
func TestGroupCutShortIsInvisibleAndRetried(t *testing.T) {
	e := newGroupEnv(t)
	ctx := context.Background()
	srcs := e.volumes("a", "b")
	gid := e.p.GroupSnapshotID("g")
	half, err := e.p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: volume.GroupMemberName(gid, srcs[0]), SourceVolumeID: srcs[0], GroupSnapshotID: gid})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.p.ListSnapshots()); n != 0 {
		t.Errorf("ListSnapshots shows %d member(s) of a group never committed", n)
	}
	_, err = e.c.GetSnapshot(ctx, &csipb.GetSnapshotRequest{SnapshotId: half.ID})
	wantGroupCode(t, "get a member of a group never committed", err, codes.NotFound)
	_, err = e.g.GetVolumeGroupSnapshot(ctx, &csipb.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gid})
	wantGroupCode(t, "get a group never committed", err, codes.NotFound)

	time.Sleep(10 * time.Millisecond) // a later creation time tells the new cut from the old
	grp, err := e.create("g", srcs)
	if err != nil {
		t.Fatal(err)
	}
	if grp.GetGroupSnapshotId() != gid || len(grp.GetSnapshots()) != 2 {
		t.Fatalf("retried group = %v", grp)
	}
	if !grp.GetSnapshots()[0].GetCreationTime().AsTime().After(half.CreatedAt) {
		t.Error("the retried create kept the member of the interrupted one: it was cut at another instant than the rest")
	}
}

// A delete killed after it marked the group: the group is gone for every
// reader, and the retried delete (or a create of the same name) finishes
// it.
func TestGroupDeleteCutShortIsFinished(t *testing.T) {
	e := newGroupEnv(t)
	ctx := context.Background()
	srcs := e.volumes("a", "b")
	grp, err := e.create("g", srcs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.BeginGroupDelete(grp.GetGroupSnapshotId()); err != nil {
		t.Fatal(err)
	}
	_, err = e.g.GetVolumeGroupSnapshot(ctx, &csipb.GetVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId()})
	wantGroupCode(t, "get a group being deleted", err, codes.NotFound)
	if n := len(e.p.ListSnapshots()); n != 0 {
		t.Errorf("ListSnapshots shows %d member(s) of a group being deleted", n)
	}
	// The same name again: the old group is finished off, a new one cut.
	again, err := e.create("g", srcs)
	if err != nil || len(again.GetSnapshots()) != 2 {
		t.Fatalf("create over a group being deleted = %v, %v", again, err)
	}
	if _, err := e.p.BeginGroupDelete(again.GetGroupSnapshotId()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.g.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: again.GetGroupSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.RawGroupSnapshot(again.GetGroupSnapshotId()); err == nil {
		t.Error("group record left after the retried delete")
	}
	if ids := e.p.GroupMembers(again.GetGroupSnapshotId()); len(ids) != 0 {
		t.Errorf("members left after the retried delete: %v", ids)
	}
}

func TestGroupSnapshotRefusals(t *testing.T) {
	e := newGroupEnv(t)
	ctx := context.Background()
	srcs := e.volumes("a", "b")
	other, err := pool.Open(t.TempDir(), pool.Options{NodeID: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	foreign := other.VolumeID("x") // a volume of a pool this controller does not serve
	for _, tt := range []struct {
		what string
		name string
		srcs []string
		code codes.Code
	}{
		{"no name", "", srcs, codes.InvalidArgument},
		{"no volumes", "g", nil, codes.InvalidArgument},
		{"empty volume ID", "g", []string{srcs[0], ""}, codes.InvalidArgument},
		{"a volume twice", "g", []string{srcs[0], srcs[0]}, codes.InvalidArgument},
		{"malformed volume ID", "g", []string{srcs[0], "../x"}, codes.NotFound},
		{"missing volume", "g", []string{srcs[0], e.p.VolumeID("missing")}, codes.NotFound},
		{"volumes of two pools", "g", []string{srcs[0], foreign}, codes.FailedPrecondition},
	} {
		_, err := e.create(tt.name, tt.srcs)
		wantGroupCode(t, tt.what, err, tt.code)
	}
	_, err = e.g.CreateVolumeGroupSnapshot(ctx, &csipb.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: srcs, Parameters: map[string]string{"x": "y"}})
	wantGroupCode(t, "unknown parameter", err, codes.InvalidArgument)

	// A volume written as a raw block device cannot be frozen.
	st, _ := e.c.stores.volume(srcs[1])
	if err := st.inuse.Put(inuse.Entry{VolumeID: srcs[1], Node: "n", StagingPath: "/staging/b", Block: true, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, err = e.create("g", srcs)
	wantGroupCode(t, "a volume staged as a writable block device", err, codes.FailedPrecondition)
	if n := len(e.p.GroupMembers(e.p.GroupSnapshotID("g"))); n != 0 {
		t.Errorf("a refused group left %d member(s)", n)
	}

	for _, id := range []string{"", "not-a-group"} {
		_, err := e.g.GetVolumeGroupSnapshot(ctx, &csipb.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id})
		want := codes.NotFound
		if id == "" {
			want = codes.InvalidArgument
		}
		wantGroupCode(t, "get "+id, err, want)
		_, err = e.g.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id})
		if id == "" {
			wantGroupCode(t, "delete without ID", err, codes.InvalidArgument)
		} else if err != nil {
			t.Errorf("delete of a malformed ID = %v, want success", err)
		}
	}
}

// A CO's own snapshot that happens to carry a member's name is never
// taken for a leftover member and deleted: the group is refused instead.
func TestGroupNeverDeletesAnotherSnapshot(t *testing.T) {
	e := newGroupEnv(t)
	ctx := context.Background()
	srcs := e.volumes("a", "b")
	gid := e.p.GroupSnapshotID("g")
	own, err := e.c.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: volume.GroupMemberName(gid, srcs[0]), SourceVolumeId: srcs[0]})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.create("g", srcs)
	wantGroupCode(t, "a group whose member's name a snapshot has", err, codes.AlreadyExists)
	if _, err := e.c.GetSnapshot(ctx, &csipb.GetSnapshotRequest{SnapshotId: own.GetSnapshot().GetSnapshotId()}); err != nil {
		t.Errorf("the CO's snapshot is gone: %v", err)
	}
	if ids := e.p.GroupMembers(gid); len(ids) != 0 {
		t.Errorf("the refused group left members %v", ids)
	}
}
