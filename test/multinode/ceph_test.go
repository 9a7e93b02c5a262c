package multinode

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/proc"
)

// The ceph backend: the package's tests share one CephFS cluster
// (internal/testutil/ceph; its start is 10-25 s), each test mounts its own
// clients (one ceph-fuse per process, in its own network namespace, and a
// "reader" of its own for what reached the storage) and keeps its pool in
// a directory of its own in the CephFS.

// withCeph adds ceph to the backends of TestFencingNodeDead,
// TestFencingNodePartitioned and TestFencingNodeFilevolKilledWhileWriting
// (about 40 s together after the cluster's start), of the tests of
// attach and detach, two controllers, GC, the index, repair and snapshots
// (backendsWithCeph), and runs TestFencingNodeEvictedOnAttach; make test
// runs TestFencingNodeBlocklisted on ceph, the case no other package
// proves through filevol, and TestFencingNodeDeadEvictedByController, the
// controller's own eviction.
var withCeph = flag.Bool("ceph", false, "also run the fencing cases and the other shared-pool tests on a CephFS shared pool (make ceph-long)")

func TestMain(m *testing.M) { os.Exit(proc.Cleanup(ceph.Main(m))) }

// fenceBackends are the filesystems the fencing tests run on: ceph only
// with -ceph, the others always.
func fenceBackends() []string { return backendsWithCeph() }

// backendsWithCeph are backends, and ceph with -ceph.
func backendsWithCeph() []string {
	if *withCeph {
		return append(append([]string{}, backends...), "ceph")
	}
	return backends
}

// startCeph joins the package's cluster and mounts the test's reader:
// c.storage is the pool as that client sees it.
func (c *cluster) startCeph() {
	t := c.t
	c.cph = ceph.Shared(t)
	c.cephDir = c.cph.ForSharedPool(t)
	c.storage = filepath.Join(c.cph.MountNode(t, "reader"), c.cephDir, "pool")
}

// cephPool mounts the CephFS for process name and returns the test's pool
// in that mount.
func (c *cluster) cephPool(name string) string {
	p := filepath.Join(c.cph.MountNode(c.t, name), c.cephDir, "pool")
	if err := os.MkdirAll(p, 0o750); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// cephImage reports whether a loop device's backing file is an image of
// this test's pool, through any of its clients' mounts.
func (c *cluster) cephImage(backing string) bool {
	return strings.HasPrefix(backing, filepath.Join(c.cph.Dir(), "mnt")+"/") && strings.Contains(backing, "/"+c.cephDir+"/pool/")
}

// evict has the MDS evict node's client, as the cluster's admin (an
// operator, or the controller with credentials: fencing_evict_test.go)
// fences a node: its locks go and its
// address is blocklisted (the MDS's default), so its client is done for.
// The address leaves the blocklist at the test's end.
func (c *cluster) evict(node string) ceph.Client {
	c.t.Helper()
	s := c.cph.Evict(c.t, node)
	c.t.Cleanup(func() { c.cph.Unblocklist(c.t, s) })
	return s
}

// killCephClientAtEnd kills node's ceph-fuse at the test's end, before
// the kernel's leftovers are cleaned: a write of its device still waiting
// on a cut-off or blocklisted client then fails at once (ENOTCONN) instead
// of holding the clean-up.
func (c *cluster) killCephClientAtEnd(node string) {
	c.t.Cleanup(func() { c.cph.KillClient(c.t, node) })
}
