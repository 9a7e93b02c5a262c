package pool

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// TestOpenRepairs hand-crafts each state a crash can leave (see the table in
// the package doc) and checks what Open makes of it.
func TestOpenRepairs(t *testing.T) {
	id := VolumeID("pvc-crash")
	other := VolumeID("pvc-other")
	tests := []struct {
		name string
		// crash turns a pool holding volume pvc-crash into the crashed state.
		crash func(t *testing.T, vdir string)
		// want: the volumes dir after Open (pvc-other's files are not listed).
		want        []string
		quarantined int  // files in quarantine/
		listed      bool // pvc-crash in List
		imageExists bool
		// used: pvc-crash was used (CommitImage) before the crash; else
		// it is still pending (pending.go), its blank image made by a
		// first use that did not commit it (a snapshot of it, say) unless
		// fresh is set: then it has none, as a thin create leaves it.
		used, fresh bool
		// firstUse: after Open, pvc-crash is used (CommitImage), which
		// must succeed; imageSize is then checked after it.
		firstUse bool
		// imageSize, when set, is the size pvc-crash's image must have.
		imageSize int64
	}{
		{
			name:  "create or delete interrupted after the commit: roll forward",
			crash: func(t *testing.T, v string) { mv(t, v+"/"+id+".img", v+"/.tmp-"+id+".img") },
			want:  []string{id + ".img", id + ".json"}, listed: true, imageExists: true,
		},
		{
			name:  "create interrupted before the commit: tmp image removed",
			crash: func(t *testing.T, v string) { rm(t, v+"/"+id+".json"); mv(t, v+"/"+id+".img", v+"/.tmp-"+id+".img") },
			want:  nil,
		},
		{
			name:  "unpublished record removed, the volume kept",
			crash: func(t *testing.T, v string) { write(t, v+"/.tmp-"+id+".json.k3x9", "{") },
			want:  []string{id + ".img", id + ".json"}, listed: true, imageExists: true,
		},
		{
			name: "unpublished record and tmp image removed",
			crash: func(t *testing.T, v string) {
				rm(t, v+"/"+id+".json")
				mv(t, v+"/"+id+".img", v+"/.tmp-"+id+".img")
				write(t, v+"/.tmp-"+id+".json.1", "{")
			},
			want: nil,
		},
		{
			name:  "image without record quarantined, never deleted",
			crash: func(t *testing.T, v string) { rm(t, v+"/"+id+".json") },
			want:  nil, quarantined: 1,
		},
		{
			name:  "record of a used volume without image kept, not remade",
			crash: func(t *testing.T, v string) { rm(t, v+"/"+id+".img") },
			want:  []string{id + ".json"}, listed: true, used: true,
		},
		{
			name:  "thin blank volume not used yet: the record alone, its image made at first use",
			crash: func(t *testing.T, v string) {}, fresh: true,
			want: []string{id + ".json"}, listed: true, firstUse: true, imageSize: 1 << 20,
		},
		{
			name:  "blank image lost before its first use: left, made at first use",
			crash: func(t *testing.T, v string) { rm(t, v+"/"+id+".img") },
			want:  []string{id + ".json"}, listed: true, firstUse: true, imageSize: 1 << 20,
		},
		{
			name:  "blank image left short before its first use: grown at first use",
			crash: func(t *testing.T, v string) { truncate(t, v+"/"+id+".img", 0) },
			want:  []string{id + ".img", id + ".json"}, listed: true, imageExists: true, firstUse: true, imageSize: 1 << 20,
		},
		{
			name:  "blank image made at first use, its rename cut short: rolled forward, grown at first use",
			crash: func(t *testing.T, v string) { rm(t, v+"/"+id+".img"); write(t, v+"/.tmp-"+id+".img", "") },
			want:  []string{id + ".img", id + ".json"}, listed: true, imageExists: true, firstUse: true, imageSize: 1 << 20,
		},
		{
			name: "record, image and tmp image: tmp quarantined",
			crash: func(t *testing.T, v string) {
				write(t, v+"/.tmp-"+id+".img", "maybe data")
			},
			want: []string{id + ".img", id + ".json"}, quarantined: 1, listed: true, imageExists: true,
		},
		{
			// durable.RenameNoReplace links and unlinks where the
			// filesystem has no RENAME_NOREPLACE (GlusterFS's FUSE
			// client): a crash between the two leaves the image under its
			// temporary name too. Quarantining that name kept a second
			// link to the live image, and after the volume's delete its
			// data, for ever (the shared pool's kill test on GlusterFS).
			name:  "image renamed by link and unlink, cut between the two: its temporary name removed",
			crash: func(t *testing.T, v string) { link(t, v+"/"+id+".img", v+"/.tmp-"+id+".img") },
			want:  []string{id + ".img", id + ".json"}, listed: true, imageExists: true,
		},
		{
			name:  "unknown files left alone",
			crash: func(t *testing.T, v string) { write(t, v+"/README", "x"); write(t, v+"/.tmp-foo", "x") },
			want:  []string{".tmp-foo", "README", id + ".img", id + ".json"}, listed: true, imageExists: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := testutil.Scratch(t, "pool")
			p := openPool(t, dir, Options{})
			v := mustCreate(t, p, volume.CreateRequest{Name: "pvc-crash", CapacityBytes: 1 << 20})
			if _, err := p.CommitImage(mustCreate(t, p, volume.CreateRequest{Name: "pvc-other", CapacityBytes: 1 << 20})); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.used:
				if _, err := p.CommitImage(v); err != nil {
					t.Fatal(err)
				}
			case !tt.fresh:
				if err := p.materialize(v); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			tt.crash(t, dir+"/volumes")

			p = openPool(t, dir, Options{})
			var got []string
			for _, name := range ls(t, p.vdir) {
				if !strings.Contains(name, other) {
					got = append(got, name)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("volumes dir after Open: %v, want %v", got, tt.want)
			}
			if q := ls(t, p.qdir); len(q) != tt.quarantined {
				t.Errorf("quarantine holds %v, want %d files", q, tt.quarantined)
			}
			list := p.List()
			if len(list) != 1+btoi(tt.listed) {
				t.Errorf("List = %+v", list)
			}
			if _, err := p.Get(id); (err == nil) != tt.listed {
				t.Errorf("Get = %v", err)
			}
			if p.ImageExists(id) != tt.imageExists {
				t.Errorf("ImageExists = %v, want %v", p.ImageExists(id), tt.imageExists)
			}
			if !p.ImageExists(other) {
				t.Error("the other volume lost its image")
			}
			if tt.firstUse {
				got, err := p.Get(id)
				if err == nil {
					_, err = p.CommitImage(got)
				}
				if err != nil {
					t.Fatalf("first use after Open: %v", err)
				}
			}
			if tt.imageSize > 0 {
				if fi, err := os.Stat(p.imagePath(id)); err != nil || fi.Size() != tt.imageSize {
					t.Errorf("image after Open: %v, want %d bytes", err, tt.imageSize)
				}
			}
			// Whatever state was left, the volume can be deleted and made again.
			if err := p.Delete(context.Background(), id); err != nil {
				t.Errorf("Delete: %v", err)
			}
			mustCreate(t, p, volume.CreateRequest{Name: "pvc-crash", CapacityBytes: 1 << 20})
		})
	}
}

// TestOpenLeavesSharedPoolAlone: a second process opening a pool in use must
// not take the first one's in-flight temporary files for garbage.
func TestOpenLeavesSharedPoolAlone(t *testing.T) {
	dir := testutil.Scratch(t, "pool")
	first := openPool(t, dir, Options{})
	inflight := first.vdir + "/.tmp-" + VolumeID("x") + ".img"
	write(t, inflight, "")

	second := openPool(t, dir, Options{})
	if _, err := os.Stat(inflight); err != nil {
		t.Fatalf("Open of a pool in use removed %s: %v", inflight, err)
	}
	v := mustCreate(t, second, volume.CreateRequest{Name: "from-second", CapacityBytes: 1 << 20})
	if _, err := first.Get(v.ID); err != nil { // Get reads the disk
		t.Errorf("first.Get of second's volume: %v", err)
	}
	if len(first.List()) != 1 {
		t.Errorf("Get did not refresh the first pool's index: %+v", first.List())
	}
	_ = first.Close()
	_ = second.Close()

	openPool(t, dir, Options{})
	if _, err := os.Stat(inflight); !os.IsNotExist(err) {
		t.Errorf("Open of an unused pool kept %s: %v", inflight, err)
	}
}

// TestCreateOverStrayImage: an image without a record at the new volume's
// name is quarantined, not overwritten.
func TestCreateOverStrayImage(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	id := VolumeID("pvc-stray")
	write(t, p.ImagePath(id), "someone's data")
	write(t, p.tmpImagePath(id), "stale tmp image of a crashed create")
	v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "pvc-stray", CapacityBytes: 1 << 20}))
	if fi, err := os.Stat(p.ImagePath(v.ID)); err != nil || fi.Size() != 1<<20 {
		t.Errorf("image: %v, %v", fi, err)
	}
	q := ls(t, p.qdir)
	if len(q) != 1 {
		t.Fatalf("quarantine holds %v", q)
	}
	if data, _ := os.ReadFile(p.qdir + "/" + q[0]); string(data) != "someone's data" {
		t.Errorf("quarantined %q", data)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mv(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Link(from, to); err != nil {
		t.Fatal(err)
	}
}
