package faults

import (
	"os"
	"path/filepath"

	"github.com/filevol/filevol/internal/testutil/ceph"
)

// The ceph backend of the shared-pool kill test (-ceph, make faults): the
// package's one CephFS cluster (internal/testutil/ceph, started by the
// first test that asks, torn down by TestMain), a ceph-fuse client per
// process in a network namespace of its own, and one of the test's own
// for what reached the storage; each test's pool in a directory of its
// own in the CephFS.

// startCeph joins the package's cluster, readied for a shared pool (room
// known, the MDS ticking every second).
func (sp *sharedPool) startCeph() {
	sp.cph = ceph.Shared(sp.t)
	sp.cephDir = sp.cph.ForSharedPool(sp.t)
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
