// Package split runs filevol as two processes that share nothing but the
// pool directory — `--mode controller` and `--mode node`, as a controller
// Deployment and a node DaemonSet would — and proves the controller
// decides from the pool alone: csi-sanity with separate controller and
// node endpoints, and the stories that need both (in use, freeze).
package split

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/proc"
	"github.com/filevol/filevol/test/sanity/harness"
)

func TestSanitySplitProcesses(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "split-sanity")
	bin := proc.BuildDriver(t)
	ctrl := startProc(t, bin, dir, "controller")
	node := startProc(t, bin, dir, "node")
	if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := harness.ProcessConfig("unix://"+node.Sock, filepath.Join(dir, "mnt"))
	cfg.ControllerAddress = "unix://" + ctrl.Sock
	sanity.Test(t, cfg)
	if t.Failed() {
		t.Logf("controller log:\n%s\nnode log:\n%s", ctrl.LogText(), node.LogText())
	}
	ctrl.Stop(t)
	node.Stop(t)
	checkNoLeaks(t, dir)
}

// checkNoLeaks asserts that nothing is left: no file in the pool's
// volume, snapshot, in-use and freeze directories, no loop device backed
// by a file under dir, no mount under it.
func checkNoLeaks(t *testing.T, dir string) {
	t.Helper()
	for _, sub := range []string{"volumes", "snapshots", "inuse", "freeze"} {
		entries, _ := os.ReadDir(filepath.Join(dir, "pool", sub))
		for _, e := range entries {
			if sub == "freeze" && strings.HasPrefix(e.Name(), ".owner-") {
				continue // a stopped controller's lock file; the next controller or node removes it
			}
			t.Errorf("left in the pool: %s/%s", sub, e.Name())
		}
	}
	harness.CheckKernelClean(t, dir)
}
