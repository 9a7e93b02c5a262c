package csi

import (
	"context"
	"errors"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volid"
)

// A second kind of volume, registered beside the image pool, gets every
// node call on its volumes, already validated, locked, looked up and
// recorded by the service; the image backend and the kernel see none of
// it, and the image volumes keep working beside it.
func TestNodeRoutesToSecondKind(t *testing.T) {
	e := newNodeEnv(t)
	f := newFakeNode(t)
	e.node.serve(fakePool, fakeKind, f)
	ctx := context.Background()

	img := e.volume("img", "ext4", 64<<20)
	e.mustStage(img, e.staging("img"), capMount("", rw))
	kernelCalls := len(e.k.Log())

	id := f.volume("x")
	staging, target := e.staging("x"), e.target("x")
	// Paths reach the backend cleaned by the path policy.
	e.mustStage(id, staging+"/.", capMount("xfs", ro))
	if want := "stage " + id + " {StagingPath:" + staging + " Block:false FSType:xfs MountFlags:[] ReadOnly:true Unrecorded:true Secrets:<0 secret(s), redacted>}"; !f.took(want) {
		t.Errorf("calls %s, want %q", f, want)
	}
	if recs := inUseIn(t, f.dir, id); len(recs) != 1 || recs[0].Node != "n1" || recs[0].StagingPath != staging || !recs[0].ReadOnly {
		t.Errorf("in-use records in the fake kind's pool: %+v, want this node's, read-only, at %s", recs, staging)
	}
	if recs := e.inUse(id); len(recs) != 0 {
		t.Errorf("the image pool holds in-use records of the fake kind's volume: %+v", recs)
	}
	e.mustPublish(id, staging, target, capBlock(single), true)
	if want := "publish " + id + " {StagingPath:" + staging + " TargetPath:" + target + " Block:true MountFlags:[] ReadOnly:true SingleWriter:true Secrets:<0 secret(s), redacted>}"; !f.took(want) {
		t.Errorf("calls %s, want %q", f, want)
	}
	stats, err := e.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || len(stats.GetUsage()) != 1 || stats.GetUsage()[0].GetTotal() != 1<<30 {
		t.Errorf("stats: %v, %v; want the fake's", stats, err)
	}
	exp, err := e.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, StagingTargetPath: staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 30}})
	if err != nil || exp.GetCapacityBytes() != 2<<30 || !f.took("expand "+id+" {VolumePath:"+target+" StagingPath:"+staging+" RequiredBytes:2147483648") {
		t.Errorf("expand: %v, %v; calls %s", exp, err, f)
	}
	h, err := e.node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: target})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 1 || h.GetVolumeHealth().GetHealthStatuses()[0].GetReason() != "Fake" {
		t.Errorf("health: %v, %v; want the fake's", h, err)
	}
	if mp, err := e.node.freezePoint(id); mp != "" || err != nil {
		t.Errorf("freeze point of a kind without one: %q, %v; want none", mp, err)
	}
	if err := e.unpublish(id, target); err != nil || !f.took("unpublish "+id+" "+target) {
		t.Errorf("unpublish: %v; calls %s", err, f)
	}
	if err := e.unstage(id, staging); err != nil || !f.took("unstage "+id+" "+staging) {
		t.Errorf("unstage: %v; calls %s", err, f)
	}
	if recs := inUseIn(t, f.dir, id); len(recs) != 0 {
		t.Errorf("unstaged, and still recorded: %+v", recs)
	}
	if log := e.k.Log(); len(log) != kernelCalls {
		t.Errorf("the fake kind's volume reached the kernel: %v", log[kernelCalls:])
	}
	// The image volume is where it was, and unstages as ever.
	if len(e.devices(img)) != 1 {
		t.Fatalf("image volume lost its device")
	}
	if err := e.unstage(img, e.staging("img")); err != nil {
		t.Fatal(err)
	}
}

// A well-formed ID whose pool and kind no backend serves names no volume
// on this node: NOT_FOUND from every call, before any lock, record or
// backend (spec: "volume does not exist").
func TestNodeVolumeOfKindOrPoolNotServed(t *testing.T) {
	e := newNodeEnv(t)
	f := newFakeNode(t)
	e.node.serve(fakePool, fakeKind, f)
	ctx := context.Background()
	for what, id := range map[string]string{
		"kind served nowhere":         volid.NewVolume("nfs", e.pool.ID(), "x"),
		"pool not served":             volid.NewVolume(volid.KindImage, "0badc0de", "x"),
		"kind served in another pool": volid.NewVolume(fakeKind, e.pool.ID(), "x"),
	} {
		t.Run(what, func(t *testing.T) {
			staging, target := e.staging("x"), e.target("x")
			calls := map[string]error{
				"stage": e.stage(id, staging, capMount("", rw)), "publish": e.publish(id, staging, target, capMount("", rw), false),
				"unpublish": e.unpublish(id, target), "unstage": e.unstage(id, staging),
			}
			_, calls["stats"] = e.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
			_, calls["expand"] = e.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target})
			_, calls["health"] = e.node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{VolumeId: id})
			for call, err := range calls {
				wantCode(t, call, err, codes.NotFound)
				if !strings.Contains(err.Error(), "does not serve") {
					t.Errorf("%s: %v, want a message that says what is not served", call, err)
				}
			}
			if recs := e.inUse(id); len(recs) != 0 {
				t.Errorf("in-use records %+v", recs)
			}
			if f.String() != "" {
				t.Errorf("the fake kind was called: %s", f)
			}
		})
	}
}

// The in-use records are the service's, whatever the kind: a failed stage
// drops the record only when the backend says nothing of the volume is
// left here, and the reconcile drops a record of a volume its backend no
// longer holds.
func TestNodeInUseRecordsOfSecondKind(t *testing.T) {
	e := newNodeEnv(t)
	f := newFakeNode(t)
	e.node.serve(fakePool, fakeKind, f)
	id := f.volume("x")

	f.stageErr = errors.New("fake stage failed")
	if err := e.stage(id, e.staging("x"), capMount("", rw)); codeOf(err) != codes.Internal {
		t.Fatalf("failed stage: %v, want INTERNAL", err)
	}
	if recs := inUseIn(t, f.dir, id); len(recs) != 0 {
		t.Errorf("a stage that left nothing kept its record: %+v", recs)
	}
	f.leftover = true
	_ = e.stage(id, e.staging("x"), capMount("", rw))
	if recs := inUseIn(t, f.dir, id); len(recs) != 1 {
		t.Errorf("a stage that left something behind lost its record: %+v", recs)
	}
	f.staged[id] = false
	e.node.ReconcileInUse()
	if recs := inUseIn(t, f.dir, id); len(recs) != 0 {
		t.Errorf("reconcile kept the record of a volume its backend no longer holds: %+v", recs)
	}
	// A volume whose record the kind no longer has: NOT_FOUND, no record.
	delete(f.vols, id)
	f.stageErr = nil
	wantCode(t, "stage of a deleted volume", e.stage(id, e.staging("x"), capMount("", rw)), codes.NotFound)
	if recs := inUseIn(t, f.dir, id); len(recs) != 0 {
		t.Errorf("stage of a deleted volume left a record: %+v", recs)
	}
}

func inUseIn(t *testing.T, dir, id string) []inuse.Entry {
	t.Helper()
	recs, err := inuse.New(dir).Of(id)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
