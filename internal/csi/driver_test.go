package csi

import "testing"

// Two shared pools on one node (a release on GlusterFS, one on CephFS) must
// report topology keys of their own: kubelet refuses a driver whose key a
// node already has with another value. filevol's own names keep the key
// their volumes' PersistentVolumes were made with.
func TestSharedPoolTopologyKeyPerDriver(t *testing.T) {
	for driver, want := range map[string]string{
		"shared.filevol.csi.io": "topology.filevol.csi.io/pool",
		"filevol.csi.io":        "topology.filevol.csi.io/pool",
		"ceph.filevol.csi.io":   "topology.ceph.filevol.csi.io/pool",
		"gluster.example.com":   "topology.gluster.example.com/pool",
	} {
		seg := Config{DriverName: driver, Shared: true, PoolName: "p", NodeID: "n1"}.topology().GetSegments()
		if len(seg) != 1 || seg[want] != "p" {
			t.Errorf("driver %s: topology %v, want only %s=p", driver, seg, want)
		}
	}
	seg := Config{DriverName: "ceph.filevol.csi.io", NodeID: "n1"}.topology().GetSegments()
	if len(seg) != 1 || seg[TopologyKey] != "n1" {
		t.Errorf("a node-local pool's topology %v, want only %s=n1", seg, TopologyKey)
	}
}
