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
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/proc"
	"github.com/filevol/filevol/test/sanity/harness"
)

var run = flag.Bool("ceph", false, "run csi-sanity on a CephFS shared image pool (minutes)")

func TestMain(m *testing.M) { os.Exit(ceph.Main(m)) }

func TestSanityCephFSSharedPool(t *testing.T) {
	if !*run {
		t.Skip("minutes long: make ceph-long (go test ./test/sanity/cephfs -args -ceph)")
	}
	testutil.RequireRoot(t)
	c := ceph.Shared(t)
	pool := filepath.Join(c.MountNode(t, "node-a"), "sanity", "pool")
	if err := os.MkdirAll(pool, 0o750); err != nil {
		t.Fatal(err)
	}
	dir := testutil.Scratch(t, "ceph-sanity")
	bin := proc.BuildDriver(t)
	kubelet := filepath.Join(dir, "node-a")
	if err := os.MkdirAll(kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	p := proc.Start(t, bin, dir, "all", "--mode", "all", "--pool-shared", "--pool-name", "ceph-sanity",
		"--node-id", "node-a", "--kubelet-dir", kubelet, "--pool-dir", pool, "--ceph-admin-socket-dir", c.RunDir(),
		"--max-volumes-per-node", "4")
	cfg := harness.ProcessConfig("unix://"+p.Sock, kubelet)
	cfg.TestNodeVolumeAttachLimit = true
	sanity.Test(t, cfg)
	if t.Failed() {
		t.Logf("driver log:\n%s", p.LogText())
	}
	p.Stop(t)
	for _, sub := range []string{"volumes", "snapshots", "inuse", "attach"} {
		entries, _ := os.ReadDir(filepath.Join(pool, sub))
		for _, e := range entries {
			if sub == "attach" && e.Name() == attach.LocksName {
				continue
			}
			t.Errorf("left in the pool: %s/%s", sub, e.Name())
		}
	}
	harness.CheckKernelClean(t, dir)
	harness.CheckKernelClean(t, pool)
}
