// Package shared runs csi-sanity against a shared pool (--pool-shared):
// ControllerPublishVolume is advertised, so its tests run. Its own package:
// Ginkgo runs one suite per test binary.
package shared

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/test/sanity/harness"
)

// TestSanitySharedPool runs csi-sanity against one process that serves
// the controller and the node of a shared pool: ControllerPublishVolume is
// advertised, so its tests run, and the node tests attach before they
// stage. (csi-sanity asks the node endpoint whether a controller service
// exists, so a split pair would skip publishing; test/split's TestSharedVolumeFollowsItsPod
// runs the split processes.) Afterwards nothing of a volume may be left
// in the pool or the kernel.
func TestSanitySharedPool(t *testing.T) {
	dir := harness.RunSharedPoolProcess(t, "split-shared-sanity", "shared-test",
		func(cfg *sanity.TestConfig) { cfg.TestNodeVolumeAttachLimit = true }, "--max-volumes-per-node", "4")
	harness.CheckSharedPoolEmpty(t, filepath.Join(dir, "pool"))
	harness.CheckKernelClean(t, dir)
}
