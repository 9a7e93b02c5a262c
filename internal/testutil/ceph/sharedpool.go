package ceph

import (
	"strings"
	"testing"
)

// ForSharedPool readies the cluster for a test of a shared image pool and
// returns the test's directory in the CephFS (TestDir): it waits for the
// data pool's room (WaitForRoom) and has the MDS tick every second until
// the test ends. A client's first look at a record another client has
// just renamed into place waits for the MDS's next tick (5 s by default),
// and an attach hands records between clients several times
// (docs/shared-pools-cephfs.md): a tick a second keeps such tests short.
func (c *Cluster) ForSharedPool(t testing.TB) string {
	t.Helper()
	c.WaitForRoom(t)
	c.Ceph(t, "config", "set", "mds", "mds_tick_interval", "1")
	t.Cleanup(func() { c.Ceph(t, "config", "rm", "mds", "mds_tick_interval") })
	return TestDir(t)
}

// TestDir is a directory name for the test, made from its name: tests
// that share the package's cluster each work in one of their own.
func TestDir(t testing.TB) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
}
