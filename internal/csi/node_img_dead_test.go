package csi

import (
	"context"
	"slices"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
)

// deadDevice makes id's one device unreachable, shown by the name a dead
// client's lazily unmounted mount gives it ("/volumes/<id>.img"), and
// returns it as the fake lists it.
func (e *nodeEnv) deadDevice(id string) loop.Device {
	e.t.Helper()
	devs := e.devices(id)
	if len(devs) != 1 {
		e.t.Fatalf("devices of %s: %v", id, devs)
	}
	e.k.SetUnreachable(devs[0].Path, "/volumes/"+id+".img")
	all, err := e.k.List()
	if err != nil {
		e.t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(d loop.Device) bool { return d.Path == devs[0].Path })
	return all[i]
}

func (e *nodeEnv) attached(d loop.Device) bool {
	e.t.Helper()
	all, err := e.k.List()
	if err != nil {
		e.t.Fatal(err)
	}
	return slices.ContainsFunc(all, func(x loop.Device) bool { return x.Path == d.Path })
}

// TestUnreachableDevicesOfThisNode: devices left on a dead client's files
// (node_img_dead.go). mine was staged here and its staging mount is gone:
// the sweep detaches it, and only then drops its in-use record (the start's
// reconcile kept it). shared was staged here too, but another node also
// records it in use: left alone. staged is still mounted at its staging
// path: the sweep leaves it, NodeUnstageVolume unmounts and detaches it.
func TestUnreachableDevicesOfThisNode(t *testing.T) {
	e := newNodeEnv(t)
	ctx := context.Background()
	ids := map[string]string{}
	dead := map[string]loop.Device{}
	for _, name := range []string{"mine", "shared", "staged"} {
		ids[name] = e.committed(name, "ext4", 64<<20)
		e.mustStage(ids[name], e.staging(name), capMount("ext4", rw))
		if name != "staged" {
			if err := e.k.UnmountAll(e.staging(name)); err != nil {
				t.Fatal(err)
			}
		}
		dead[name] = e.deadDevice(ids[name])
	}
	if err := inuse.New(e.pool.Dir()).Put(inuse.Entry{VolumeID: ids["shared"], Node: "n2", StagingPath: "/elsewhere"}); err != nil {
		t.Fatal(err)
	}
	e.node.reconcileBeforeServing()
	if len(e.inUse(ids["mine"])) != 1 {
		t.Fatalf("the start dropped the in-use record of %s while its dead device is attached: %v", ids["mine"], e.inUse(ids["mine"]))
	}
	r, err := e.node.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.DetachedLoops, []string{dead["mine"].Path}) {
		t.Fatalf("sweep detached %v, want only %s (mine)", r.DetachedLoops, dead["mine"].Path)
	}
	if e.attached(dead["mine"]) || !e.attached(dead["shared"]) || !e.attached(dead["staged"]) {
		t.Fatalf("after the sweep: mine %v, shared %v, staged %v attached; want false, true, true",
			e.attached(dead["mine"]), e.attached(dead["shared"]), e.attached(dead["staged"]))
	}
	if recs := e.inUse(ids["mine"]); len(recs) != 0 {
		t.Fatalf("in-use record of %s kept after its device was detached: %v", ids["mine"], recs)
	}
	if err := e.unstage(ids["staged"], e.staging("staged")); err != nil {
		t.Fatalf("NodeUnstageVolume: %v", err)
	}
	if e.attached(dead["staged"]) {
		t.Fatalf("NodeUnstageVolume left the dead device %s attached", dead["staged"].Path)
	}
	if _, ok := e.top(e.staging("staged")); ok {
		t.Fatal("NodeUnstageVolume left the staging mount")
	}
}
