// Package freeze carries a filesystem freeze from the controller that cuts
// a snapshot or clone to the node that has the volume's filesystem
// mounted, through the pool directory they share: no network path, no
// memory in common, so it works when the controller is another process on
// another host, on every filesystem the pool may live on.
//
//	<pool>/freeze/<volume ID>.req   the controller's request: node, token, deadline
//	<pool>/freeze/<volume ID>.ack   the node's answer: frozen, not mounted, or why not
//
// The controller (Requester.Hold) publishes the request with a no-replace
// link, so one freeze of a volume runs at a time (a request past its
// deadline is a dead controller's, and is replaced); it waits for the
// node's answer carrying its token, runs the clone while renewing the
// deadline, then removes the request and waits for the answer to go: the
// node has thawed.
//
// The node (Agent) watches the directory with inotify, and polls it too,
// for shared filesystems whose other clients' changes inotify never
// reports. It answers only requests that name it. Before it freezes it
// takes the volume's node lock (NodeUnstageVolume takes it too: unmounting
// a frozen filesystem would leave its superblock frozen with nobody to
// thaw it) and leaves a durable mark; it thaws when the request goes, is
// replaced, or passes its deadline (its controller died), and when it
// starts it thaws what its marks name (it died itself).
//
// A group snapshot (Requester.HoldAll) publishes the requests of all its
// volumes before it waits for any answer; the node answers the requests
// of one sweep side by side, so every filesystem of the group is frozen
// before any clone starts, and all are thawed together after the last.
//
// The package knows nothing of CSI or gRPC; the kernel is reached through
// the functions an Agent is given.
package freeze
