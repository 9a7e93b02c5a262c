// Package csi holds filevol's gRPC services — Identity, Controller,
// GroupController (group snapshots: group_controller.go, group_cut.go),
// SnapshotMetadata (changed-block tracking: snapshot_metadata.go,
// snapshot_images.go, internal/cbt) and Node — and what they share:
// request validation (validate.go), the one place where errors become gRPC
// codes (errors.go), per-volume try-locks (inflight.go), the server that
// serves them on the CSI endpoint (server.go), the mount and path policy
// (policy.go), the node's garbage collection (gc.go: the in-use records,
// and each kind's sweep under the services' locks) and the enforcement of
// volumes' I/O limits on pods' cgroups (qos.go; the parameters in
// qos_params.go, their change in controller_modify.go).
//
// The services do what every kind of volume shares and route the rest by
// the pool and kind that a volume ID names (routes.go): the controller to
// a VolumeStore (store.go), the node to a NodeBackend (node_backend.go).
// Image volumes are internal/pool (an ImagePool) and internal/pool/imagenode,
// directory volumes internal/dirpool and internal/dirpool/dirnode; the
// services import none of them (internal/app wires them), and ask a kind
// what it can do (volume.Traits) rather than which kind it is. A new kind
// of volume or pool implements both halves and is registered beside them
// (Driver.Serve).
//
// It owns no state: volumes live in the pools, the kernel's view (loop
// devices, mounts) is asked for through the host interface (host.go) on
// every call, so a restarted or rebooted node is always described by what
// the kernel shows, not by what a record claims.
package csi
