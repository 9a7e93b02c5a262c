package pool

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/filevol/filevol/internal/testutil"
)

// A blank volume's record says its image is pending until CommitImage
// (pending.go); what the record on disk says is what Open acts on.
func TestCommitImage(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
	v := mustCreate(t, p, CreateRequest{Name: "blank", CapacityBytes: 1 << 20})
	if !v.ImagePending || !onDisk(t, p, v.ID).ImagePending {
		t.Fatalf("a blank create: ImagePending %v, on disk %v; want true", v.ImagePending, onDisk(t, p, v.ID).ImagePending)
	}
	committed, err := p.CommitImage(v)
	if err != nil {
		t.Fatal(err)
	}
	if committed.ImagePending || onDisk(t, p, v.ID).ImagePending {
		t.Error("ImagePending still set after CommitImage")
	}
	// The index follows the record (sameVolume once ignored the mark and
	// kept the pending copy).
	for _, l := range p.List() {
		if l.ID == v.ID && l.ImagePending {
			t.Error("List still shows the volume pending after CommitImage")
		}
	}
	// Once committed, nothing is rewritten: the record file stays the same.
	before := stat(t, p.recordPath(v.ID))
	if _, err := p.CommitImage(committed); err != nil {
		t.Fatal(err)
	}
	if after := stat(t, p.recordPath(v.ID)); !os.SameFile(before, after) {
		t.Error("CommitImage of a committed volume rewrote its record")
	}

	// An image gone before its first use cannot be committed.
	lost := mustCreate(t, p, CreateRequest{Name: "lost", CapacityBytes: 1 << 20})
	rm(t, p.imagePath(lost.ID))
	if _, err := p.CommitImage(lost); !errors.Is(err, ErrImageMissing) {
		t.Errorf("CommitImage without image: %v, want ErrImageMissing", err)
	}
	if !onDisk(t, p, lost.ID).ImagePending {
		t.Error("a failed CommitImage cleared the mark")
	}
}

// Growing an image fsyncs it, so an expansion clears the mark too; a clone
// holds data and is never pending.
func TestPendingClearedByExpandNeverSetByClone(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
	v := mustCreate(t, p, CreateRequest{Name: "grown", CapacityBytes: 1 << 20})
	if _, err := p.Expand(context.Background(), v.ID, 2<<20); err != nil {
		t.Fatal(err)
	}
	if onDisk(t, p, v.ID).ImagePending {
		t.Error("ImagePending still set after an expansion")
	}
	clone := mustCreate(t, p, CreateRequest{Name: "clone", CapacityBytes: 2 << 20,
		Source: &ContentSource{Kind: SourceVolume, ID: v.ID}})
	if clone.ImagePending || onDisk(t, p, clone.ID).ImagePending {
		t.Error("a clone is marked ImagePending")
	}
}

func onDisk(t *testing.T, p *Pool, id string) Volume {
	t.Helper()
	v, err := p.readRecord(id)
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
	for _, prov := range []string{ProvisioningThin, ProvisioningThick} {
		t.Run(prov, func(t *testing.T) {
			p := openPool(t, testutil.Scratch(t, "pool-pending"), Options{})
			name := "stray-" + prov
			write(t, p.imagePath(VolumeID(name)), "someone's data")
			v := mustCreate(t, p, CreateRequest{Name: name, CapacityBytes: 1 << 20, Provisioning: prov})
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
