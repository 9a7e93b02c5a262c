package pool

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

func statT(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestExpand(t *testing.T) {
	ctx := context.Background()
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	for _, prov := range []string{volume.ProvisioningThin, volume.ProvisioningThick} {
		v := mustCreate(t, p, volume.CreateRequest{Name: "pvc-" + prov, CapacityBytes: 16 << 20, Provisioning: prov})
		g, err := p.Expand(ctx, v.ID, 48<<20, 0)
		if err != nil {
			t.Fatalf("%s: %v", prov, err)
		}
		if g.CapacityBytes != 48<<20 {
			t.Errorf("%s: Expand = %+v", prov, g)
		}
		if got, _ := p.Get(v.ID); !reflect.DeepEqual(got, g) {
			t.Errorf("%s: record %+v, want %+v", prov, got, g)
		}
		st := statT(t, p.ImagePath(v.ID))
		if st.Size != 48<<20 {
			t.Errorf("%s: image is %d bytes", prov, st.Size)
		}
		if prov == volume.ProvisioningThick && st.Blocks*512 < 48<<20 {
			t.Errorf("thick: %d bytes allocated after expansion, want the new range too", st.Blocks*512)
		}
		if prov == volume.ProvisioningThin && st.Blocks != 0 {
			t.Errorf("thin: %d blocks allocated", st.Blocks)
		}
		// CSI: expanding to the current size succeeds, shrinking does not.
		if same, err := p.Expand(ctx, v.ID, 48<<20, 0); err != nil || !reflect.DeepEqual(same, g) {
			t.Errorf("%s: same size = %+v, %v", prov, same, err)
		}
		if _, err := p.Expand(ctx, v.ID, 32<<20, 0); !errors.Is(err, volume.ErrShrink) {
			t.Errorf("%s: shrink = %v, want ErrShrink", prov, err)
		}
		if st := statT(t, p.ImagePath(v.ID)); st.Size != 48<<20 {
			t.Errorf("%s: the refused shrink changed the image to %d bytes", prov, st.Size)
		}
	}
	if _, err := p.Expand(ctx, VolumeID("missing"), 1<<30, 0); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("Expand of a missing volume = %v", err)
	}
}

// TestExpandNoSpace: a thick expansion must fit what is free after the
// reserve; a failed one leaves the volume as it was.
func TestExpandNoSpace(t *testing.T) {
	ctx := context.Background()
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	c, err := p.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	v := mustCreate(t, p, volume.CreateRequest{Name: "pvc-thick", CapacityBytes: 1 << 20, Provisioning: volume.ProvisioningThick})
	if _, err := p.Expand(ctx, v.ID, c.FreeBytes+1<<30, 0); !errors.Is(err, volume.ErrNoSpace) {
		t.Fatalf("thick expansion beyond free space = %v, want ErrNoSpace", err)
	}
	if got, _ := p.Get(v.ID); got.CapacityBytes != 1<<20 || statT(t, p.ImagePath(v.ID)).Size != 1<<20 {
		t.Errorf("failed expansion changed the volume: %+v", got)
	}
}

// TestOpenRollsExpansionForward: a crash between growing the image and
// rewriting the record leaves an image larger than its record; Open records
// the real size rather than cut off space a filesystem may already use.
func TestOpenRollsExpansionForward(t *testing.T) {
	dir := testutil.Scratch(t, "pool")
	p := openPool(t, dir, Options{})
	v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "pvc-grow", CapacityBytes: 8 << 20}))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p.ImagePath(v.ID), 24<<20); err != nil {
		t.Fatal(err)
	}
	p = openPool(t, dir, Options{})
	got, err := p.Get(v.ID)
	if err != nil || got.CapacityBytes != 24<<20 {
		t.Errorf("after Open: %+v, %v; want 24 MiB recorded", got, err)
	}
	if l := p.List(); len(l) != 1 || l[0].CapacityBytes != 24<<20 {
		t.Errorf("List after Open: %+v", l)
	}
	for _, name := range ls(t, p.vdir) {
		if strings.HasPrefix(name, ".tmp-") {
			t.Errorf("Open left %s", name)
		}
	}
}

// TestOpenRepairsSnapshots: the snapshots directory follows the volumes'
// crash rules (TestOpenRepairs).
func TestOpenRepairsSnapshots(t *testing.T) {
	sid := SnapshotID("snap-crash")
	tests := []struct {
		name        string
		crash       func(t *testing.T, s string)
		want        []string
		quarantined int
		listed      bool
	}{
		{"create or delete interrupted after the commit: roll forward",
			func(t *testing.T, s string) { mv(t, s+"/"+sid+".img", s+"/.tmp-"+sid+".img") },
			[]string{sid + ".img", sid + ".json"}, 0, true},
		{"create interrupted before the commit: removed",
			func(t *testing.T, s string) { rm(t, s+"/"+sid+".json"); mv(t, s+"/"+sid+".img", s+"/.tmp-"+sid+".img") },
			nil, 0, false},
		{"unpublished record removed",
			func(t *testing.T, s string) { write(t, s+"/.tmp-"+sid+".json.x1", "{") },
			[]string{sid + ".img", sid + ".json"}, 0, true},
		{"image without record quarantined",
			func(t *testing.T, s string) { rm(t, s+"/"+sid+".json") },
			nil, 1, false},
		{"record without image kept",
			func(t *testing.T, s string) { rm(t, s+"/"+sid+".img") },
			[]string{sid + ".json"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := testutil.Scratch(t, "pool")
			p := openPool(t, dir, Options{})
			v := mustCreate(t, p, volume.CreateRequest{Name: "pvc", CapacityBytes: 1 << 20})
			if _, err := p.CreateSnapshot(context.Background(), volume.SnapshotRequest{Name: "snap-crash", SourceVolumeID: v.ID}); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			tt.crash(t, dir+"/snapshots")
			p = openPool(t, dir, Options{})
			if got := ls(t, p.sdir); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("snapshots dir after Open: %v, want %v", got, tt.want)
			}
			if q := ls(t, p.qdir); len(q) != tt.quarantined {
				t.Errorf("quarantine holds %v", q)
			}
			if l := p.ListSnapshots(); (len(l) == 1) != tt.listed {
				t.Errorf("ListSnapshots = %+v", l)
			}
			if err := p.DeleteSnapshot(context.Background(), sid); err != nil {
				t.Errorf("DeleteSnapshot: %v", err)
			}
			if _, err := p.CreateSnapshot(context.Background(), volume.SnapshotRequest{Name: "snap-crash", SourceVolumeID: v.ID}); err != nil {
				t.Errorf("snapshot again: %v", err)
			}
		})
	}
}
