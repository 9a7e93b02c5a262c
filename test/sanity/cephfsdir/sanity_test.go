// Package cephfsdir runs csi-sanity against a shared directory pool on
// CephFS: directory volumes (provisioningMode: directory), each a
// directory with a CephFS quota, in a ceph-fuse mount of the harness's
// cluster, served by one filevol (--mode all, --pool-shared). Snapshots
// are CephFS snapshots and restores and clones copies
// (docs/shared-pools-cephfs.md): sanity's snapshot and clone specs run.
// Minutes long: make ceph-long, or go test ./test/sanity/cephfsdir -args -ceph.
package cephfsdir

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/proc"
	"github.com/filevol/filevol/test/sanity/harness"
)

var run = flag.Bool("ceph", false, "run csi-sanity on a CephFS shared directory pool (minutes)")

func TestMain(m *testing.M) { os.Exit(proc.Cleanup(ceph.Main(m))) }

func TestSanityCephFSDirectoryPool(t *testing.T) {
	if !*run {
		t.Skip("minutes long: make ceph-long (go test ./test/sanity/cephfsdir -args -ceph)")
	}
	c, made := harness.CephFSDirs(t, "pool", "dirs")
	pool, dirs := made[0], made[1]
	dir := harness.RunSharedPoolProcess(t, "ceph-sanity-dir", "ceph-sanity-dir", func(cfg *sanity.TestConfig) {
		cfg.TestVolumeParameters = map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory}
		cfg.TestVolumeMutableParameters = nil
	}, "--pool-dir", pool, "--dir-pool-dir", dirs, "--ceph-admin-socket-dir", c.RunDir())
	entries, err := os.ReadDir(dirs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case ".filevol", "owners": // the pool's own
		case "attach", "inuse": // a shared pool's records: none may be left
			left, _ := os.ReadDir(filepath.Join(dirs, e.Name()))
			for _, l := range left {
				if l.Name() != attach.LocksName {
					t.Errorf("left in the directory pool: %s/%s", e.Name(), l.Name())
				}
			}
		default:
			t.Errorf("left in the directory pool: %s", e.Name())
		}
	}
	harness.CheckKernelClean(t, dir)
}
