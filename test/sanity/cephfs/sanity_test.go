// Package cephfs runs csi-sanity against a shared image pool on CephFS:
// one filevol serving the controller and the node (--mode all,
// --pool-shared, so ControllerPublishVolume is advertised and the node
// tests attach before they stage) on a pool in a ceph-fuse mount of the
// harness's cluster (internal/testutil/ceph). Minutes long, so it runs
// only when asked: make ceph-long, or go test ./test/sanity/cephfs -args -ceph.
package cephfs

import (
	"flag"
	"os"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/proc"
	"github.com/filevol/filevol/test/sanity/harness"
)

var run = flag.Bool("ceph", false, "run csi-sanity on a CephFS shared image pool (minutes)")

func TestMain(m *testing.M) { os.Exit(proc.Cleanup(ceph.Main(m))) }

func TestSanityCephFSSharedPool(t *testing.T) {
	if !*run {
		t.Skip("minutes long: make ceph-long (go test ./test/sanity/cephfs -args -ceph)")
	}
	c, dirs := harness.CephFSDirs(t, "pool")
	pool := dirs[0]
	dir := harness.RunSharedPoolProcess(t, "ceph-sanity", "ceph-sanity",
		func(cfg *sanity.TestConfig) { cfg.TestNodeVolumeAttachLimit = true },
		"--pool-dir", pool, "--ceph-admin-socket-dir", c.RunDir(), "--max-volumes-per-node", "4")
	harness.CheckSharedPoolEmpty(t, pool)
	harness.CheckKernelClean(t, dir)
	harness.CheckKernelClean(t, pool)
}
