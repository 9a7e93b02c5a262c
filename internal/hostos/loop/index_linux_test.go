package loop_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestIndexAgreesWithFind: on real loop devices, one Index answers every
// file's look-up as Find does — a file with two devices (one read-only),
// a file reached through a symlink, a file deleted under its device, a
// device attached through a mount that is gone (its backing path is
// mount-relative), a file with no device, and a file of another directory
// with the same name — and so does a second Index after devices change.
func TestIndexAgreesWithFind(t *testing.T) {
	dir, pool := setupPool(t)
	vols := filepath.Join(pool, "volumes")
	a := newImage(t, vols, "a.img", 1<<20)
	b := newImage(t, vols, "b.img", 1<<20)
	gone := newImage(t, vols, "gone.img", 1<<20)
	foreign := newImage(t, vols, "foreign.img", 64<<20)
	idle := newImage(t, vols, "idle.img", 1<<20)
	twin := newImage(t, dir, "a.img", 1<<20) // same base name, another file
	link := filepath.Join(dir, "link-to-b.img")
	if err := os.Symlink(b, link); err != nil {
		t.Fatal(err)
	}
	mustAttach(t, a, loop.Options{})
	mustAttach(t, a, loop.Options{ReadOnly: true})
	mustAttach(t, link, loop.Options{})
	mustAttach(t, gone, loop.Options{})
	mustAttach(t, twin, loop.Options{})
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	attachThroughGoneMount(t, dir, pool, foreign)

	paths := []string{a, b, link, gone, foreign, idle, twin, filepath.Join(dir, "missing.img")}
	compare := func(when string) {
		t.Helper()
		ix, err := loop.ReadIndex()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			got, err := ix.Find(p)
			if err != nil {
				t.Fatalf("%s: Index.Find(%s): %v", when, p, err)
			}
			want := mustFind(t, p)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: Index.Find(%s) =\n%+v\nFind says\n%+v", when, p, got, want)
			}
		}
	}
	compare("attached")
	if n := len(mustFind(t, a)); n != 2 {
		t.Fatalf("Find(%s) found %d devices, want 2: the comparison above compared nothing", a, n)
	}
	if err := loop.DetachFile(a); err != nil {
		t.Fatal(err)
	}
	compare("after detaching a")
}

// TestIndexRereadsWhatItReturns: a device detached after the pass is not
// returned, and one whose number was re-attached to another file meanwhile
// is not returned for the first file: Find re-reads every device it
// returns. A device attached after the pass is not seen (the contract:
// read the Index inside the request that asks).
func TestIndexRereadsWhatItReturns(t *testing.T) {
	dir := setup(t)
	a := newImage(t, dir, "a.img", 1<<20)
	b := newImage(t, dir, "b.img", 1<<20)
	d := mustAttach(t, a, loop.Options{})
	ix, err := loop.ReadIndex()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ix.Find(a); err != nil || len(got) != 1 || got[0].Path != d.Path {
		t.Fatalf("Index.Find(%s) = %+v, %v; want %s", a, got, err, d.Path)
	}
	if err := loop.Detach(d.Path); err != nil {
		t.Fatal(err)
	}
	if got, err := ix.Find(a); err != nil || len(got) != 0 {
		t.Fatalf("Index.Find(%s) after the device was detached = %+v, %v; want nothing", a, got, err)
	}
	mustAttach(t, b, loop.Options{})
	if got, err := ix.Find(b); err != nil || len(got) != 0 {
		t.Fatalf("Index.Find(%s) for a device attached after the pass = %+v, %v; want nothing", b, got, err)
	}
}
