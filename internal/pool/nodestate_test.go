package pool

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// The pool hands the node its markers, keeps them where every earlier
// build put them (a marker a killed driver left is seen after an upgrade),
// leaves them alone when it opens, and removes a volume's with it.
func TestNodeStateMarkers(t *testing.T) {
	dir := testutil.Scratch(t, "pool")
	p := openPool(t, dir, Options{})
	v := mustCreate(t, p, volume.CreateRequest{Name: "fmt", CapacityBytes: 1 << 20, FSType: "ext4"})
	ns := p.NodeState()
	if ns.Format.IsSet(v.ID) || ns.Grow.IsSet(v.ID) {
		t.Fatal("fresh volume reported as interrupted format or growth")
	}
	// What the previous build wrote: the same files.
	for _, path := range []string{dir + "/volumes/" + v.ID + ".formatting", dir + "/volumes/" + v.ID + ".growing"} {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A reopened pool (the crash case) sees them, and neither repairs nor
	// reports them.
	p2, err := Open(dir, Options{NodeID: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if !p2.NodeState().Format.IsSet(v.ID) || !p2.NodeState().Grow.IsSet(v.ID) {
		t.Fatal("markers of the previous build not seen after reopen")
	}
	if o, err := p2.FindOrphans(); err != nil || len(o.TempFiles)+o.Count() != 0 {
		t.Fatalf("FindOrphans = %+v, %v: markers taken for orphans", o, err)
	}
	if err := ns.Format.Clear(v.ID); err != nil || ns.Format.IsSet(v.ID) {
		t.Fatalf("Format.Clear: %v, still set %v", err, ns.Format.IsSet(v.ID))
	}
	// Delete removes the markers a format or growth that never finished
	// left: a later volume of the same name must not inherit them.
	if err := ns.Format.Set(v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	if ns.Format.IsSet(v.ID) || ns.Grow.IsSet(v.ID) {
		t.Fatal("a marker outlived its volume")
	}
	if got := ls(t, p.vdir); len(got) != 0 {
		t.Errorf("volumes/ holds %v after the delete", got)
	}
}

// Freeze marks live where earlier builds put them, one per volume.
func TestFrozenMarks(t *testing.T) {
	dir := testutil.Scratch(t, "pool")
	p := openPool(t, dir, Options{})
	ns := p.NodeState()
	id := VolumeID("pvc")
	if m, err := ns.Frozen.IDs(); err != nil || len(m) != 0 {
		t.Fatalf("marks of a new pool = %v, %v", m, err)
	}
	if err := ns.Frozen.Set(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/frozen/" + id); err != nil {
		t.Fatalf("freeze mark not where earlier builds look: %v", err)
	}
	if m, _ := ns.Frozen.IDs(); len(m) != 1 || m[0] != id {
		t.Errorf("marks = %v", m)
	}
	if err := ns.Frozen.Clear(id); err != nil {
		t.Fatal(err)
	}
	if err := ns.Frozen.Clear(id); err != nil {
		t.Errorf("second Clear: %v", err)
	}
	if m, _ := ns.Frozen.IDs(); len(m) != 0 {
		t.Errorf("marks after Clear = %v", m)
	}
	if err := ns.Frozen.Set("../x"); !errors.Is(err, volume.ErrInvalidID) {
		t.Errorf("Set of a bad ID = %v", err)
	}
}
