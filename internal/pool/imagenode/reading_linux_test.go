package imagenode

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/reading"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// TestReadingAgreesWithPerVolumeLookups: on the real kernel, with volumes
// staged and published as kubelet leaves them (a mount volume published
// twice, a block volume published, one staged only, one never staged, and
// a block volume whose device was detached under its binds), one shared
// reading answers usage, health and stats for each volume exactly as the
// per-volume look-ups (a Find and a mount table of its own) do, and so does
// the node view's reading (its own listing and table, reading.WithListed).
func TestReadingAgreesWithPerVolumeLookups(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 not installed")
	}
	dir := testutil.Scratch(t, "imagenode-reading") // its cleanup unmounts and detaches what is left under dir
	var h hostos.Host
	e := newEnv(t, dir, func(poolDir string) hostos.Host { h = hostos.New(poolDir); return h })
	p := e.pool
	type vol struct{ id, staging, target, target2 string }
	var vols []vol
	add := func(name string, block, stage bool, targets int) vol {
		v := vol{id: e.volume(name, "ext4", 32<<20), staging: e.path(name + "/globalmount")}
		if stage {
			e.mustStage(v.id, v.staging, block, false)
		}
		if targets > 0 {
			v.target = e.path(name + "/mount")
			e.mustPublish(v.id, v.staging, v.target, block, false)
		}
		if targets > 1 {
			v.target2 = e.path(name + "/mount-2")
			e.mustPublish(v.id, v.staging, v.target2, block, true)
		}
		vols = append(vols, v)
		return v
	}
	add("fs-published", false, true, 2)
	add("block-published", true, true, 1)
	add("fs-staged", false, true, 0)
	add("never-staged", false, false, 0)
	gone := add("block-gone", true, true, 1)
	// A filesystem the kernel made read-only under its binds (as
	// errors=remount-ro does): a remount of the staging mount changes the
	// superblock, and the publish bind stays rw over a read-only one.
	ro := add("fs-remounted-ro", false, true, 1)
	if err := mount.Mount("", ro.staging, "", []string{"remount", "ro"}); err != nil {
		t.Fatal(err)
	}
	// An image deleted under its mounted device.
	deleted := add("image-deleted", false, true, 1)
	if err := os.Remove(p.ImagePath(deleted.id)); err != nil {
		t.Fatal(err)
	}
	// The block volume's device detached under its binds (a bind of a
	// device node does not hold it): health must say LoopDeviceGone.
	devs, err := loop.Find(p.ImagePath(gone.id))
	if err != nil || len(devs) != 1 {
		t.Fatalf("devices of %s: %+v, %v", gone.id, devs, err)
	}
	if err := loop.Detach(devs[0].Path); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	r, err := reading.Read(h)
	if err != nil {
		t.Fatal(err)
	}
	b := e.node
	shared := reading.With(ctx, r)
	// The node view's reading: the listing and the table it read itself.
	listing, err := h.Loops.List()
	if err != nil {
		t.Fatal(err)
	}
	table, err := h.Mounts.Table()
	if err != nil {
		t.Fatal(err)
	}
	listed := reading.WithListed(ctx, listing, table)
	// Answers from the paths asked alone: this backend fails the test if
	// it reads every device or the whole table when given a path.
	strict := New(p, hostos.Host{Loops: noScan{t, h.Loops}, Mounts: noTable{t, h.Mounts}, FS: h.FS}, "n1", false)
	saw := map[string]bool{}
	for _, v := range vols {
		img := p.ImagePath(v.id)
		got, err := r.Usage(img)
		if err != nil {
			t.Fatal(err)
		}
		want, err := reading.ImageUsage(h, img)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Devices, want.Devices) || !reflect.DeepEqual(got.Uses, want.Uses) {
			t.Errorf("%s: usage from the shared reading\n%v\nper-volume\n%v", v.id, got, want)
		}
		rec, err := p.Get(v.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range []string{"", v.target, v.target2} {
			sharedHealth, err := b.Health(shared, rec, target, v.staging)
			if err != nil {
				t.Fatal(err)
			}
			perVolume := perVolumeHealth(t, b, rec, target, v.staging)
			if !reflect.DeepEqual(reasons(sharedHealth), reasons(perVolume)) {
				t.Errorf("%s at %q: health from the shared reading %v, per-volume %v", v.id, target, reasons(sharedHealth), reasons(perVolume))
			}
			listedHealth, err := b.Health(listed, rec, target, v.staging)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(reasons(listedHealth), reasons(perVolume)) {
				t.Errorf("%s at %q: health from the node view's listing %v, per-volume %v", v.id, target, reasons(listedHealth), reasons(perVolume))
			}
			pathHealth, err := strict.Health(ctx, rec, target, v.staging)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(reasons(pathHealth), reasons(perVolume)) {
				t.Errorf("%s at %q: health from the paths alone %v, per-volume %v", v.id, target, reasons(pathHealth), reasons(perVolume))
			}
			for _, x := range pathHealth {
				saw[x.GetReason()] = true
			}
			if target == "" {
				continue
			}
			statsShared, errShared := b.Stats(shared, rec, target)
			statsOwn, errOwn := strict.Stats(ctx, rec, target) // from the path alone
			if codeOf(errShared) != codeOf(errOwn) || len(statsShared) != len(statsOwn) {
				t.Errorf("%s at %s: stats from the shared reading %v (%v), from the path alone %v (%v)", v.id, target, statsShared, errShared, statsOwn, errOwn)
			}
		}
	}
	for _, r := range []string{volume.ReasonLoopDeviceGone, volume.ReasonFilesystemReadOnly, volume.ReasonImageDeleted, volume.ReasonImageMissing} {
		if !saw[r] {
			t.Errorf("no health answer reported %s: the comparison missed an abnormal case", r)
		}
	}
}

// noScan and noTable fail the test when an answer given paths reads every
// loop device or the whole mount table.
type noScan struct {
	t *testing.T
	hostos.Loops
}

func (n noScan) Find(string) ([]loop.Device, error) {
	n.t.Error("Find: a scan of every device")
	return nil, nil
}
func (n noScan) List() ([]loop.Device, error) {
	n.t.Error("List: a scan of every device")
	return nil, nil
}
func (n noScan) Index() (hostos.LoopIndex, error) {
	n.t.Error("Index: a scan of every device")
	return nil, errors.New("no scan")
}

type noTable struct {
	t *testing.T
	hostos.Mounter
}

func (n noTable) Table() (mount.Table, error) {
	n.t.Error("Table: a read of the whole mount table")
	return nil, errors.New("no table")
}

// perVolumeHealth is the image backend's health as it was answered before
// readings were shared: a Find and a mount table for this volume alone.
func perVolumeHealth(t *testing.T, b *Node, vol volume.Volume, publish, staging string) []*csipb.VolumeHealth_VolumeHealthEntry {
	t.Helper()
	devs, err := loop.Find(b.pool.ImagePath(vol.ID))
	if err != nil {
		t.Fatal(err)
	}
	st := imageHealth(b.pool, vol.ID, devs)
	table, err := mount.Read()
	if err != nil {
		t.Fatal(err)
	}
	st = append(st, mountHealth(table, devs, publish, staging)...)
	if e := b.poolFullHealth(vol); e != nil {
		st = append(st, e)
	}
	return st
}

func reasons(st []*csipb.VolumeHealth_VolumeHealthEntry) []string {
	out := []string{}
	for _, x := range st {
		out = append(out, x.GetStatus().String()+"/"+x.GetReason())
	}
	return out
}
