package freeze

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/nodestate"
	"github.com/filevol/filevol/internal/volid"
)

// poolMarks are a node's marks as the node keeps them in a pool
// (internal/nodestate), for an agent.
type poolMarks struct{ s *nodestate.State }

func (m poolMarks) Mark(id string) error    { return m.s.Frozen.Set(id) }
func (m poolMarks) Unmark(id string) error  { return m.s.Frozen.Clear(id) }
func (m poolMarks) List() ([]string, error) { return m.s.Frozen.IDs() }

// Two nodes share a pool, each with its own kernel and marks: node B's
// start leaves node A's mark of a filesystem A holds frozen (B does not
// have it mounted, and must not take the mark for a stale one of its
// own); A's start thaws it and drops it.
func TestThawLeftoversOnASharedPool(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "volumes"), 0o700); err != nil {
		t.Fatal(err)
	}
	valid := func(id string) error { _, err := volid.ParseVolume(id); return err }
	state := func(node string) *nodestate.State {
		s, err := nodestate.OpenShared(dir, filepath.Join(dir, "owners", node), valid)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ka, kb := newKernel(), newKernel()
	ka.mounts[vol], ka.frozen["/a/staging"] = "/a/staging", true
	a, b := ka.agent(t, dir, "node-a"), kb.agent(t, dir, "node-b")
	a.Marks, b.Marks = poolMarks{state("node-a")}, poolMarks{state("node-b")}
	if err := a.Marks.Mark(vol); err != nil {
		t.Fatal(err)
	}

	b.ThawLeftovers()
	if ids, _ := a.Marks.List(); len(ids) != 1 {
		t.Fatalf("node B's start dropped node A's mark: A's marks %v", ids)
	}
	a.ThawLeftovers()
	if ids, _ := a.Marks.List(); len(ids) != 0 || ka.isFrozen("/a/staging") {
		t.Errorf("node A's start: marks %v, frozen %v; want thawed and dropped", ids, ka.isFrozen("/a/staging"))
	}
}
