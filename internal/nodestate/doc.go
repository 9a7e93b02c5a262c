// Package nodestate owns the node side's crash markers: empty files in the
// pool directory that tell a restarted driver what a killed one left half
// done on a node's kernel and devices.
//
//	<pool>/volumes/<id>.formatting  a first mkfs in progress (Format)
//	<pool>/volumes/<id>.growing     an offline filesystem growth in progress (Grow)
//	<pool>/frozen/<id>              a filesystem frozen for a clone, not yet thawed (Frozen)
//
// The paths are those of every earlier build: a marker a killed driver
// left must be seen by the next one, whatever version it is.
//
// On a pool that several hosts share (OpenShared) the freeze marks are
// each node's own, in the directory the pool keeps for it:
//
//	<pool>/owners/<node key>/frozen/<id>
//
// A freeze mark names kernel state of one host (a superblock it froze);
// the node that starts thaws what its marks name and drops the marks of
// filesystems no longer mounted on it. Kept in one directory for every
// node, a node's start would drop the marks of filesystems frozen on the
// others, and a node killed while one was frozen would never thaw it.
// Marks that a node-local past left in <pool>/frozen are adopted, at
// open, by the node named in their volume's record (AdoptLegacyFrozen):
// on a node-local pool that node is the only one that could set them.
//
// The format and grow markers stay beside the volume, on every pool: they
// describe the image's contents (a filesystem half made or half grown by
// our own mkfs or resize2fs), not a host's kernel. Whichever node stages
// the volume next, on a shared pool after a failover another one, must see
// them, or it refuses to format over a half-made filesystem and to repair
// a half-grown one. Only a stage of the volume (one node at a time holds
// it) and its delete touch them; no repair, GC or thaw does.
//
// The pool keeps the records these markers are about and removes a
// deleted volume's markers with it (ForgetVolume); it leaves their files
// alone when it scans (VolumeMarker). This package knows nothing of
// records, gRPC or CSI, and must not import pool, csi or any hostos
// package: IDs are checked with the function its caller gives.
package nodestate
