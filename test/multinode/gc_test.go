package multinode

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/poolowner"
)

// TestGCLeavesAnotherNodesLoopDevice: the orphan collector detaches a loop
// device of a pool image that nothing mounts (debris of a crash between
// attach and mount), and only its own node's. node-a holds such a device
// (as between its attach and its mount, attached as node-a attaches:
// with its owner written into the device); node-b holds one too, on
// another volume. node-b's sweep (at its start) detaches its own and
// leaves node-a's; node-a's sweep then detaches its own. On GlusterFS the
// backing file is already another file for node-b (node-a's client mount,
// another device number: told by identity, not by the path string); on a
// local directory the nodes share a kernel, a filesystem and a file, and
// only the owner in the device tells them apart.
func TestGCLeavesAnotherNodesLoopDevice(t *testing.T) {
	for _, backend := range backendsWithCeph() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b")
			a, b := c.nodes["node-a"], c.nodes["node-b"]
			var ids []string
			for _, name := range []string{"gc-a", "gc-b"} {
				id := c.create(name, blockCap)
				a.Use(t, id, blockCap, c.mustPublish(id, "node-a", blockCap)) // makes its image
				a.Release(t, id)
				c.unpublish(id, "node-a")
				ids = append(ids, id)
			}
			image := func(n *node, id string) string { return filepath.Join(n.pool, "volumes", id+".img") }
			onA, err := loop.Attach(t.Context(), image(a, ids[0]), loop.Options{Owner: "filevol/" + poolowner.Key("node-a")})
			if err != nil {
				t.Fatal(err)
			}
			onB, err := loop.Attach(t.Context(), image(b, ids[1]), loop.Options{Owner: "filevol/" + poolowner.Key("node-b")})
			if err != nil {
				t.Fatal(err)
			}
			b.p.Stop(t)
			b.restart() // sweeps at start
			sweepDone(t, b)
			if !b.p.LogHas("detached a loop device nothing used", ids[1]) {
				t.Fatalf("node-b's sweep did not detach its own unused device %s:\n%s", onB.Path, b.p.LogText())
			}
			if !attachedTo(t, onA) {
				t.Fatalf("node-b's sweep detached node-a's device %s (%s)", onA.Path, onA.BackingFile)
			}
			a.p.Stop(t)
			a.restart()
			sweepDone(t, a)
			if !a.p.LogHas("detached a loop device nothing used", ids[0]) {
				t.Fatalf("node-a's sweep did not detach its own unused device %s:\n%s", onA.Path, a.p.LogText())
			}
		})
	}
}

// sweepDone waits for n's first garbage collection sweep to end: it runs
// beside serving, so the socket answers before it is done.
func sweepDone(t *testing.T, n *node) {
	t.Helper()
	if !n.p.WaitLog(2*time.Minute, "garbage collection sweep done") {
		t.Fatalf("%s: no garbage collection sweep ended within 2 minutes of its start:\n%s", n.Name, n.p.LogText())
	}
}

// attachedTo reports whether d is still attached to its backing file,
// waiting up to a second for a detach to show.
func attachedTo(t *testing.T, d loop.Device) bool {
	t.Helper()
	for range 10 {
		devs, err := loop.List()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range devs {
			found = found || (x.Path == d.Path && strings.HasSuffix(x.BackingFile, filepath.Base(d.BackingFile)))
		}
		if !found {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}
