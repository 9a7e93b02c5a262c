package ceph

import (
	"strings"
	"testing"
)

// AddUser makes the cephx user client.<name> with caps (pairs of service
// and capability: "mon", "allow r", "mds", "allow *") and returns its key;
// it is removed at the test's end. A user of that name already there is
// kept with its capabilities (auth get-or-create).
func (c *Cluster) AddUser(t testing.TB, name string, caps ...string) string {
	t.Helper()
	c.Ceph(t, append([]string{"auth", "get-or-create", "client." + name}, caps...)...)
	t.Cleanup(func() { c.Ceph(t, "auth", "rm", "client."+name) })
	return strings.TrimSpace(c.Ceph(t, "auth", "get-key", "client."+name))
}
