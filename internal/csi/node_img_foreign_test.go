package csi

import (
	"slices"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestAttachedLeavesAnotherNodesDevices: nodes that share one kernel (the
// multi-node e2e cluster, each node's pool at the same path in its own
// mount namespace) see each other's loop devices, and sysfs shows them under
// this pool's path. A device whose path names our volume b but whose file is
// another node's does not make b attached here: only a's device, backed by
// our file, does.
func TestAttachedLeavesAnotherNodesDevices(t *testing.T) {
	e := newNodeEnv(t)
	a := e.committed("a", "ext4", 64<<20)
	b := e.committed("b", "ext4", 64<<20)
	e.mustStage(a, e.staging("a"), capMount("ext4", rw))
	e.k.AddForeignDevice(loop.Device{Path: "/dev/loop40", Number: 40, Major: 7, Minor: 40, SizeBytes: 64 << 20, BackingFile: e.image(b)})
	var f stagedFinder
	for _, nv := range e.node.vols.all {
		if x, ok := nv.NodeBackend.(stagedFinder); ok {
			f = x
		}
	}
	if f == nil {
		t.Fatal("no backend lists attached volumes")
	}
	ids, err := f.Attached()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{a}) {
		t.Fatalf("Attached() = %v, want only %s (the device on %s's path is another node's file)", ids, a, b)
	}
}
