package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/pool/imagenode"
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/volume"
)

// TestSharedPoolNodeLeavesOtherNodesWork: two nodes share one pool
// directory, each with its own kernel (a fake each). Node B starting
// (csi.New thaws its leftovers) and sweeping (GC) leaves alone what is
// node A's: A's freeze mark of a filesystem A holds frozen, an image A
// just published whose record B's view of the directory does not show
// yet, and A's temporary image of a create in flight. A's own start
// still resolves its own mark.
func TestSharedPoolNodeLeavesOtherNodesWork(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "pool")
	open := func(node string) *pool.Pool {
		p, err := pool.Open(dir, pool.Options{NodeID: node, Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	node := func(p *pool.Pool, name string) *Driver {
		h := fake.New().Host()
		return New(Config{DriverName: "filevol.csi.io", NodeID: name, Node: true}, p, h, imagenode.New(p, h, name, false))
	}
	a := open("node-a")
	frozen, err := a.Create(ctx, volume.CreateRequest{Name: "a-frozen", CapacityBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.NodeState().Frozen.Set(frozen.ID); err != nil { // what A's agent does before FIFREEZE
		t.Fatal(err)
	}
	fresh, err := a.Create(ctx, volume.CreateRequest{Name: "a-fresh", CapacityBytes: 1 << 20, Provisioning: volume.ProvisioningThick})
	if err != nil {
		t.Fatal(err)
	}
	// B's view lacks the record for the sweep (a shared filesystem's
	// lookup cache); the image's own state is untouched by that.
	record := filepath.Join(a.VolumesDir(), fresh.ID+".json")
	aside := filepath.Join(dir, "record-b-does-not-see")
	inflight := filepath.Join(a.VolumesDir(), ".tmp-"+a.VolumeID("a-creating")+"@"+poolowner.Key("node-a")+".img")
	if err := os.WriteFile(inflight, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	b := open("node-b")
	d := node(b, "node-b") // thaws B's leftovers
	if err := os.Rename(record, aside); err != nil {
		t.Fatal(err)
	}
	r, err := d.Node.GC(ctx)
	if err := os.Rename(aside, record); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !a.NodeState().Frozen.IsSet(frozen.ID) {
		t.Error("node B's start dropped node A's freeze mark: A, killed now, would never thaw the filesystem")
	}
	if len(r.Quarantined) != 0 || !a.ImageExists(fresh.ID) {
		t.Errorf("node B's sweep quarantined %v: A's new volume lost its image", r.Quarantined)
	}
	if _, err := os.Stat(inflight); err != nil {
		t.Errorf("node B's start or sweep removed A's create in flight: %v", err)
	}

	// A restarted: its own mark of a filesystem it no longer has mounted
	// is dropped, as on a node-local pool.
	node(a, "node-a")
	if a.NodeState().Frozen.IsSet(frozen.ID) {
		t.Error("node A's start kept its own mark of a filesystem not mounted")
	}
}
