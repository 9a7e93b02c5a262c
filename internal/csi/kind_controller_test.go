package csi

import (
	"context"
	"slices"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// controllerWithSecondKind is the controller of a real image pool, with
// the fake kind's store registered beside it.
func controllerWithSecondKind(t *testing.T) (*ControllerService, *pool.Pool, *fakeStore) {
	t.Helper()
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	s := newControllerService(Config{NodeID: "n1"}, p)
	f := newFakeStore(t)
	s.serve(fakePool, fakeKind, f)
	return s, p, f
}

var mountRW = []*csipb.VolumeCapability{capMount("", rw)}

// Every controller call on a volume of the second kind goes to its store,
// with the in-use records and freeze requests of its pool; listings merge
// both kinds in ID order; the image pool never sees the fake's volumes.
func TestControllerRoutesToSecondKind(t *testing.T) {
	s, p, f := controllerWithSecondKind(t)
	ctx := context.Background()
	made, err := s.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "img", VolumeCapabilities: mountRW})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := volid.ParseVolume(made.GetVolume().GetVolumeId()); err != nil || v.Kind != volid.KindImage || v.Pool != p.ID() {
		t.Fatalf("CreateVolume made %s (%v), want an image in the first pool served", made.GetVolume().GetVolumeId(), err)
	}
	v, _ := f.Create(ctx, volume.CreateRequest{Name: "x", CapacityBytes: 1 << 30, FSType: "ext4"})

	got, err := s.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: v.ID})
	if err != nil || got.GetVolume().GetVolumeId() != v.ID || !f.took("get "+v.ID) {
		t.Fatalf("ControllerGetVolume: %v, %v; calls %s", got, err, f)
	}
	val, err := s.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: v.ID, VolumeCapabilities: mountRW})
	if err != nil || val.GetConfirmed() == nil {
		t.Errorf("ValidateVolumeCapabilities: %v, %v", val, err)
	}
	exp, err := s.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: v.ID, CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 30}})
	if err != nil || exp.GetCapacityBytes() != 2<<30 || !f.took("expand "+v.ID) {
		t.Errorf("ControllerExpandVolume: %v, %v; calls %s", exp, err, f)
	}
	if _, err := s.ControllerGetVolumeHealth(ctx, &csipb.ControllerGetVolumeHealthRequest{VolumeId: v.ID}); err != nil {
		t.Errorf("ControllerGetVolumeHealth: %v", err)
	}

	// Listings merge the kinds in ID order, and page across them.
	var listed []string
	token := ""
	for {
		l, err := s.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: 1, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.GetEntries() {
			listed = append(listed, e.GetVolume().GetVolumeId())
		}
		if token = l.GetNextToken(); token == "" {
			break
		}
	}
	if want := []string{made.GetVolume().GetVolumeId(), v.ID}; !slices.Equal(listed, want) {
		t.Errorf("ListVolumes listed %v, want %v", listed, want)
	}

	// Snapshots of the fake kind's volume are the fake's.
	snap, err := s.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: v.ID})
	if err != nil || !f.took("snapshot snap of "+v.ID) {
		t.Fatalf("CreateSnapshot: %v; calls %s", err, f)
	}
	sid := snap.GetSnapshot().GetSnapshotId()
	if _, err := s.GetSnapshot(ctx, &csipb.GetSnapshotRequest{SnapshotId: sid}); err != nil || !f.took("get snapshot "+sid) {
		t.Errorf("GetSnapshot: %v; calls %s", err, f)
	}
	if l, err := s.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SnapshotId: sid}); err != nil || len(l.GetEntries()) != 1 {
		t.Errorf("ListSnapshots by ID: %v, %v", l, err)
	}
	if _, err := s.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: sid}); err != nil || !f.took("delete snapshot "+sid) {
		t.Errorf("DeleteSnapshot: %v; calls %s", err, f)
	}

	// In use on a node, as recorded in the fake kind's pool: refused.
	rec := inuse.New(f.Dir())
	if err := rec.Put(inuse.Entry{VolumeID: v.ID, Node: "n2", StagingPath: "/staging"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.ID})
	wantCode(t, "DeleteVolume of a volume in use", err, codes.FailedPrecondition)
	if err := rec.Remove(v.ID, "n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.ID}); err != nil || !f.took("delete "+v.ID) {
		t.Errorf("DeleteVolume: %v; calls %s", err, f)
	}
	if p.Known(v.ID) || len(p.List()) != 1 {
		t.Errorf("the image pool holds %v", p.List())
	}
}

// A volume of a pool or kind the controller does not serve does not exist
// here: NOT_FOUND, except where the spec asks for success (DeleteVolume,
// DeleteSnapshot) or the controller hands it on (expansion deferred to
// the node).
func TestControllerVolumeOfKindOrPoolNotServed(t *testing.T) {
	s, p, f := controllerWithSecondKind(t)
	ctx := context.Background()
	for what, id := range map[string]string{
		"kind served nowhere":         volid.NewVolume("nfs", p.ID(), "x"),
		"pool not served":             volid.NewVolume(volid.KindImage, "0badc0de", "x"),
		"kind served in another pool": volid.NewVolume(fakeKind, p.ID(), "x"),
	} {
		t.Run(what, func(t *testing.T) {
			_, err := s.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
			wantCode(t, "ControllerGetVolume", err, codes.NotFound)
			_, err = s.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: mountRW})
			wantCode(t, "ValidateVolumeCapabilities", err, codes.NotFound)
			_, err = s.ControllerGetVolumeHealth(ctx, &csipb.ControllerGetVolumeHealthRequest{VolumeId: id})
			wantCode(t, "ControllerGetVolumeHealth", err, codes.NotFound)
			_, err = s.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 30}})
			wantCode(t, "ControllerExpandVolume", err, codes.NotFound)
			_, err = s.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "s", SourceVolumeId: id})
			wantCode(t, "CreateSnapshot", err, codes.NotFound)
			_, err = s.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
			wantCode(t, "DeleteVolume", err, codes.OK)
		})
	}
	other := volid.NewSnapshot("0badc0de", "s")
	_, err := s.GetSnapshot(ctx, &csipb.GetSnapshotRequest{SnapshotId: other})
	wantCode(t, "GetSnapshot of a pool not served", err, codes.NotFound)
	_, err = s.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: other})
	wantCode(t, "DeleteSnapshot of a pool not served", err, codes.OK)
	if l, err := s.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SnapshotId: other}); err != nil || len(l.GetEntries()) != 0 {
		t.Errorf("ListSnapshots of a pool not served: %v, %v; want none", l, err)
	}
	if f.String() != "" {
		t.Errorf("the fake kind was called: %s", f)
	}
}

// CreateVolume puts a volume where createStore says: a controller that
// serves only the second kind makes its volumes there, through the same
// handler.
func TestCreateVolumeGoesToTheChosenStore(t *testing.T) {
	f := newFakeStore(t)
	s := &ControllerService{cfg: Config{NodeID: "n1"}, locks: newInflight()}
	s.serve(fakePool, fakeKind, f)
	resp, err := s.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: mountRW,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if id := resp.GetVolume().GetVolumeId(); id != f.VolumeID("x") || !f.took("create x") {
		t.Errorf("CreateVolume made %s; calls %s", id, f)
	}
	again, err := s.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: mountRW,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil || again.GetVolume().GetVolumeId() != resp.GetVolume().GetVolumeId() {
		t.Errorf("retried create: %v, %v", again, err)
	}
}
