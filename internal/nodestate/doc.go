// Package nodestate owns the node side's crash markers: empty files in the
// pool directory that tell a restarted driver what a killed one left half
// done on this node's kernel and devices.
//
//	<pool>/volumes/<id>.formatting  a first mkfs in progress (Format)
//	<pool>/volumes/<id>.growing     an offline filesystem growth in progress (Grow)
//	<pool>/frozen/<id>              a filesystem frozen for a clone, not yet thawed (Frozen)
//
// The paths are those of every earlier build: a marker a killed driver
// left must be seen by the next one, whatever version it is.
//
// The pool keeps the records these markers are about and removes a
// deleted volume's markers with it (ForgetVolume); it leaves their files
// alone when it scans (VolumeMarker). This package knows nothing of
// records, gRPC or CSI, and must not import pool, csi or any hostos
// package: IDs are checked with the function its caller gives.
package nodestate
