package poolowner

import (
	"testing"

	"github.com/filevol/filevol/internal/inuse"
)

// A node's owner key is its key in the in-use records too: one key per
// node in every file name of the pool.
func TestOwnerKeyIsTheNodeKey(t *testing.T) {
	for _, node := range []string{"node-1", "a-very-long-node-name.example.com", ""} {
		if Key(node) != inuse.NodeKey(node) {
			t.Errorf("Key(%q) = %s, inuse.NodeKey = %s", node, Key(node), inuse.NodeKey(node))
		}
	}
}
