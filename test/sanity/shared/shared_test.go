// Package shared runs csi-sanity against a shared pool (--pool-shared):
// ControllerPublishVolume is advertised, so its tests run. Its own package:
// Ginkgo runs one suite per test binary.
package shared

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/proc"
	"github.com/filevol/filevol/test/sanity/harness"
)

// TestSanitySharedPool runs csi-sanity against one process that serves
// the controller and the node of a shared pool: ControllerPublishVolume is
// advertised, so its tests run, and the node tests attach before they
// stage. (csi-sanity asks the node endpoint whether a controller service
// exists, so a split pair would skip publishing; test/split's TestSharedVolumeFollowsItsPod
// runs the split processes.)
func TestSanitySharedPool(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "split-shared-sanity")
	bin := proc.BuildDriver(t)
	kubelet := filepath.Join(dir, "node-a")
	if err := os.MkdirAll(kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	p := proc.Start(t, bin, dir, "all", "--mode", "all", "--pool-shared", "--pool-name", "shared-test",
		"--node-id", "node-a", "--kubelet-dir", kubelet, "--max-volumes-per-node", "4")
	cfg := harness.ProcessConfig("unix://"+p.Sock, kubelet)
	cfg.TestNodeVolumeAttachLimit = true
	sanity.Test(t, cfg)
	if t.Failed() {
		t.Logf("driver log:\n%s", p.LogText())
	}
	p.Stop(t)
	checkNoLeaks(t, dir)
}

// checkNoLeaks: nothing of a volume is left in the pool or the kernel.
func checkNoLeaks(t *testing.T, dir string) {
	t.Helper()
	for _, sub := range []string{"volumes", "snapshots", "inuse", "attach"} {
		entries, _ := os.ReadDir(filepath.Join(dir, "pool", sub))
		for _, e := range entries {
			if sub == "attach" && e.Name() == attach.LocksName {
				continue // the permanent file of every volume's attachment lock
			}
			t.Errorf("left in the pool: %s/%s", sub, e.Name())
		}
	}
	harness.CheckKernelClean(t, dir)
}
