package pool

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// A blank volume's record says its image is pending until CommitImage
// (pending.go); what the record on disk says is what Open acts on. A thin
// one has no image until then, and that is not a loss.
func TestCommitImage(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
	v := mustCreate(t, p, volume.CreateRequest{Name: "blank", CapacityBytes: 1 << 20})
	if !v.ImagePending || !onDisk(t, p, v.ID).ImagePending {
		t.Fatalf("a blank create: ImagePending %v, on disk %v; want true", v.ImagePending, onDisk(t, p, v.ID).ImagePending)
	}
	if p.ImageExists(v.ID) || p.ImageLost(v.ID) {
		t.Errorf("a thin blank volume before its first use: ImageExists %v, ImageLost %v; want false, false",
			p.ImageExists(v.ID), p.ImageLost(v.ID))
	}
	committed, err := p.CommitImage(v)
	if err != nil {
		t.Fatal(err)
	}
	if committed.ImagePending || onDisk(t, p, v.ID).ImagePending {
		t.Error("ImagePending still set after CommitImage")
	}
	// The index follows the record (a field-by-field compare once ignored
	// the mark and kept the pending copy).
	for _, l := range p.List() {
		if l.ID == v.ID && l.ImagePending {
			t.Error("List still shows the volume pending after CommitImage")
		}
	}
	if fi := stat(t, p.imagePath(v.ID)); fi.Size() != 1<<20 {
		t.Errorf("committed image is %d bytes, want %d", fi.Size(), 1<<20)
	}
	// Once committed, nothing is rewritten: the record file stays the same.
	before := stat(t, p.vols.Path(v.ID))
	if _, err := p.CommitImage(committed); err != nil {
		t.Fatal(err)
	}
	if after := stat(t, p.vols.Path(v.ID)); !os.SameFile(before, after) {
		t.Error("CommitImage of a committed volume rewrote its record")
	}

	// Once committed, an image gone is a lost volume, never made again.
	rm(t, p.imagePath(v.ID))
	if !p.ImageLost(v.ID) {
		t.Error("ImageLost = false for a committed volume without its image")
	}
	if _, err := p.Expand(context.Background(), v.ID, 2<<20, 0); !errors.Is(err, volume.ErrImageMissing) {
		t.Errorf("Expand of a lost volume: %v, want ErrImageMissing", err)
	}
	if p.ImageExists(v.ID) {
		t.Error("a lost volume's image was made again")
	}

	// A thick blank image is made by the create; a crash may lose or
	// shorten it before its first use, and CommitImage makes or grows it.
	thick := mustCreate(t, p, volume.CreateRequest{Name: "thick", CapacityBytes: 1 << 20, Provisioning: volume.ProvisioningThick})
	if fi := stat(t, p.imagePath(thick.ID)); fi.Size() != 1<<20 || !thick.ImagePending {
		t.Fatalf("thick blank create: image %d bytes, pending %v", fi.Size(), thick.ImagePending)
	}
	if err := os.Truncate(p.imagePath(thick.ID), 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CommitImage(thick); err != nil {
		t.Fatal(err)
	}
	if fi := stat(t, p.imagePath(thick.ID)); fi.Size() != 1<<20 {
		t.Errorf("short thick image after CommitImage: %d bytes, want %d", fi.Size(), 1<<20)
	}
}

// Whatever first needs a blank volume's image makes it: a snapshot or a
// clone of it is blank, an expansion grows it (and commits it).
func TestFirstUseMakesTheImage(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
	ctx := context.Background()
	src := mustCreate(t, p, volume.CreateRequest{Name: "snap-src", CapacityBytes: 1 << 20})
	s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap", SourceVolumeID: src.ID})
	if err != nil {
		t.Fatalf("snapshot of a blank volume not used yet: %v", err)
	}
	if fi := stat(t, p.snapImagePath(s.ID)); fi.Size() != 1<<20 {
		t.Errorf("snapshot image %d bytes, want %d", fi.Size(), 1<<20)
	}
	if !onDisk(t, p, src.ID).ImagePending {
		t.Error("a snapshot committed its source: only a stage or an expansion does")
	}

	csrc := mustCreate(t, p, volume.CreateRequest{Name: "clone-src", CapacityBytes: 1 << 20})
	clone := mustCreate(t, p, volume.CreateRequest{Name: "clone", CapacityBytes: 2 << 20,
		Source: &volume.ContentSource{Kind: volume.SourceVolume, ID: csrc.ID}})
	if fi := stat(t, p.imagePath(clone.ID)); fi.Size() != 2<<20 {
		t.Errorf("clone image %d bytes, want %d", fi.Size(), 2<<20)
	}

	grown := mustCreate(t, p, volume.CreateRequest{Name: "grown", CapacityBytes: 1 << 20})
	if _, err := p.Expand(ctx, grown.ID, 3<<20, 0); err != nil {
		t.Fatal(err)
	}
	if fi := stat(t, p.imagePath(grown.ID)); fi.Size() != 3<<20 {
		t.Errorf("expanded image %d bytes, want %d", fi.Size(), 3<<20)
	}
	if onDisk(t, p, grown.ID).ImagePending {
		t.Error("an expansion left the mark")
	}
}

// Growing an image fsyncs it, so an expansion clears the mark too; a clone
// holds data and is never pending.
func TestPendingClearedByExpandNeverSetByClone(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
	v := mustCreate(t, p, volume.CreateRequest{Name: "grown", CapacityBytes: 1 << 20})
	if _, err := p.Expand(context.Background(), v.ID, 2<<20, 0); err != nil {
		t.Fatal(err)
	}
	if onDisk(t, p, v.ID).ImagePending {
		t.Error("ImagePending still set after an expansion")
	}
	clone := mustCreate(t, p, volume.CreateRequest{Name: "clone", CapacityBytes: 2 << 20,
		Source: &volume.ContentSource{Kind: volume.SourceVolume, ID: v.ID}})
	if clone.ImagePending || onDisk(t, p, clone.ID).ImagePending {
		t.Error("a clone is marked ImagePending")
	}
}

// A duplicate create of a volume in use must leave its image alone: the
// stray-image check runs only once a create owns the record.
func TestDuplicateCreateKeepsTheImage(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
	v := mustCreate(t, p, volume.CreateRequest{Name: "used", CapacityBytes: 1 << 20})
	if _, err := p.CommitImage(v); err != nil {
		t.Fatal(err)
	}
	write(t, p.imagePath(v.ID), "the volume's data")
	if _, err := p.Create(context.Background(), volume.CreateRequest{Name: "used", CapacityBytes: 1 << 20}); !errors.Is(err, volume.ErrAlreadyExists) {
		t.Fatalf("duplicate Create = %v, want ErrAlreadyExists", err)
	}
	if data, err := os.ReadFile(p.imagePath(v.ID)); err != nil || string(data) != "the volume's data" {
		t.Errorf("image after a duplicate create: %q, %v", data, err)
	}
	if q := ls(t, p.qdir); len(q) != 0 {
		t.Errorf("quarantine holds %v after a duplicate create", q)
	}
}

func onDisk(t *testing.T, p *Pool, id string) volume.Volume {
	t.Helper()
	data, err := os.ReadFile(p.vols.Path(id))
	if err != nil {
		t.Fatal(err)
	}
	v, err := recordstore.Decode[volume.Volume](p.vols.Path(id), "volume", id, recordVersion, data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// An image without a record where a create is about to put its own (Open
// quarantines those, but one can appear while the pool is open) may hold
// data: a create of either kind moves it to quarantine and never writes
// over it.
func TestCreateQuarantinesStrayImage(t *testing.T) {
	for _, prov := range []string{volume.ProvisioningThin, volume.ProvisioningThick} {
		t.Run(prov, func(t *testing.T) {
			p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
			name := "stray-" + prov
			write(t, p.imagePath(VolumeID(name)), "someone's data")
			v := mustCreate(t, p, volume.CreateRequest{Name: name, CapacityBytes: 1 << 20, Provisioning: prov})
			if prov == volume.ProvisioningThin {
				// No image until the first use, which makes a blank one.
				if p.ImageExists(v.ID) {
					t.Error("the stray image is still where the volume's image goes")
				}
				if _, err := p.CommitImage(v); err != nil {
					t.Fatal(err)
				}
			}
			if fi := stat(t, p.imagePath(v.ID)); fi.Size() != 1<<20 {
				t.Errorf("image is %d bytes, want %d", fi.Size(), 1<<20)
			}
			q := ls(t, p.qdir)
			if len(q) != 1 {
				t.Fatalf("quarantine holds %v, want the stray image", q)
			}
			if data, err := os.ReadFile(p.qdir + "/" + q[0]); err != nil || string(data) != "someone's data" {
				t.Errorf("quarantined file: %q, %v", data, err)
			}
		})
	}
}
