package faults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/testutil/ceph"
)

// The ceph backend of the shared-pool kill test (-ceph, make faults): the
// package's one CephFS cluster (internal/testutil/ceph, started by the
// first test that asks, torn down by TestMain), a ceph-fuse client per
// process in a network namespace of its own, and one of the test's own
// for what reached the storage; each test's pool in a directory of its
// own in the CephFS.

// startCeph joins the package's cluster and returns the test's directory
// in the CephFS, as a mount sees it below its root.
func (sp *sharedPool) startCeph() {
	t := sp.t
	sp.cph = ceph.Shared(t)
	sp.cph.WaitForRoom(t)
	// A client's first look at a record another client has just renamed
	// into place waits for the MDS's next tick (5 s by default), and an
	// attach hands records between clients several times
	// (docs/shared-pools-cephfs.md): a tick a second keeps the rounds
	// short, as test/ceph and test/multinode do.
	sp.cph.Ceph(t, "config", "set", "mds", "mds_tick_interval", "1")
	t.Cleanup(func() { sp.cph.Ceph(t, "config", "rm", "mds", "mds_tick_interval") })
	sp.cephDir = cephTestDir(t)
}

// cephTestDir is the test's directory in the CephFS.
func cephTestDir(t *testing.T) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
}

// cephPool mounts the CephFS for process name and returns the test's pool
// in that mount.
func (sp *sharedPool) cephPool(name string) string {
	p := filepath.Join(sp.cph.MountNode(sp.t, name), sp.cephDir, "pool")
	if err := os.MkdirAll(p, 0o750); err != nil {
		sp.t.Fatal(err)
	}
	return p
}
