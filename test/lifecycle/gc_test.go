package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
	fvvolume "github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/test/driver"
)

// TestGCFindsAndCleansOrphans plants each kind of orphan next to healthy
// staged volumes and checks that one sweep cleans what is certainly
// garbage, quarantines what might be data, reports the rest, and leaves
// every staged volume (filesystem and block) alone.
func TestGCFindsAndCleansOrphans(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "lifecycle-gc")
	ctx := context.Background()
	d := driver.Start(t, dir)

	mk := func(name string, c *spec.VolumeCapability) string {
		resp, err := d.Controller.CreateVolume(ctx, &spec.CreateVolumeRequest{
			Name: name, VolumeCapabilities: []*spec.VolumeCapability{c},
			CapacityRange: &spec.CapacityRange{RequiredBytes: 64 << 20},
		})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return resp.GetVolume().GetVolumeId()
	}
	staged := map[string]*volume{}
	for _, v := range []*volume{
		{name: "gc-fs", cap: driver.MountCap("ext4")},
		{name: "gc-block", cap: driver.BlockCap(), block: true},
	} {
		v.id = mk(v.name, v.cap)
		v.staging = filepath.Join(dir, "kubelet", v.name, "staging")
		v.target = filepath.Join(dir, "kubelet", v.name, "target")
		stageAndPublish(t, d, v)
		staged[v.id] = v
	}
	// use does to a volume's image what NodeStageVolume does before it
	// attaches: makes it (a thin blank volume has none before) and commits it.
	use := func(id string) {
		v, err := d.Pool.Get(id)
		if err == nil {
			_, err = d.Pool.CommitImage(v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// A loop device leaked by a crash between attach and mount.
	leakedID := mk("gc-leaked", driver.MountCap(""))
	use(leakedID)
	leaked, err := loop.Attach(ctx, d.Pool.ImagePath(leakedID), loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// An image whose record vanished, and a record whose image vanished.
	strayID := d.Pool.VolumeID("gc-stray")
	if err := os.WriteFile(d.Pool.ImagePath(strayID), []byte("maybe data"), 0o600); err != nil {
		t.Fatal(err)
	}
	lostID := mk("gc-lost", driver.MountCap(""))
	use(lostID)
	// A volume never used has no image yet, and that is not a loss.
	freshID := mk("gc-fresh", driver.MountCap(""))
	if err := os.Remove(d.Pool.ImagePath(lostID)); err != nil {
		t.Fatal(err)
	}

	r, err := d.Services.Node.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.DetachedLoops) != 1 || r.DetachedLoops[0] != leaked.Path {
		t.Errorf("detached %v, want only the leaked %s", r.DetachedLoops, leaked.Path)
	}
	if devs, _ := loop.Find(d.Pool.ImagePath(leakedID)); len(devs) != 0 {
		t.Errorf("leaked device still attached: %v", devs)
	}
	if len(r.Quarantined) != 1 || r.Quarantined[0] != strayID {
		t.Errorf("quarantined %v, want %s", r.Quarantined, strayID)
	}
	if _, err := os.Stat(d.Pool.ImagePath(strayID)); !os.IsNotExist(err) {
		t.Errorf("stray image still in the pool: %v", err)
	}
	if len(r.QuarantineFiles) != 1 {
		t.Errorf("quarantine holds %v, want the stray image", r.QuarantineFiles)
	}
	if len(r.RecordsWithoutImage) != 1 || r.RecordsWithoutImage[0] != lostID {
		t.Errorf("records without image %v, want %s", r.RecordsWithoutImage, lostID)
	}
	// The health RPC says the same about the lost volume.
	h, err := d.Controller.ControllerGetVolumeHealth(ctx, &spec.ControllerGetVolumeHealthRequest{VolumeId: lostID})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) == 0 ||
		h.GetVolumeHealth().GetHealthStatuses()[0].GetReason() != fvvolume.ReasonImageMissing {
		t.Errorf("health of lost volume: %v %v", h, err)
	}
	if h, err := d.Controller.ControllerGetVolumeHealth(ctx, &spec.ControllerGetVolumeHealthRequest{VolumeId: freshID}); err != nil ||
		len(h.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("health of a volume not used yet (no image, none lost): %v %v", h, err)
	}
	// Staged volumes were left alone and still work.
	for _, v := range staged {
		if devs, _ := loop.Find(d.Pool.ImagePath(v.id)); len(devs) != 1 {
			t.Errorf("%s: %d devices after GC, want 1", v.name, len(devs))
		}
		writeAt(t, v, []byte("still here"))
	}
	// A second sweep finds nothing new to do.
	if r2, err := d.Services.Node.GC(ctx); err != nil || len(r2.DetachedLoops)+len(r2.Quarantined) != 0 {
		t.Errorf("second sweep: %+v %v", r2, err)
	}
	teardown(t, d, []*volume{staged[d.Pool.VolumeID("gc-fs")], staged[d.Pool.VolumeID("gc-block")]})
	for _, id := range []string{leakedID, lostID} {
		if _, err := d.Controller.DeleteVolume(ctx, &spec.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}
