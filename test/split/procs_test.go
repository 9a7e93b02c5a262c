package split

import (
	"testing"

	"github.com/filevol/filevol/test/proc"
)

// nodeID is the node both processes serve: a node-local pool's controller
// is the controller of that node's pool.
const nodeID = "split-node"

// startProc starts bin in mode (controller or node) on the node-local
// pool under dir, as the node nodeID.
func startProc(t *testing.T, bin, dir, mode string) *proc.Proc {
	t.Helper()
	return proc.Start(t, bin, dir, mode, "--mode", mode, "--node-id", nodeID, "--kubelet-dir", dir)
}
