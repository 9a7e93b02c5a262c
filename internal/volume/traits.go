package volume

// Traits are what a kind of volume can do that the services must know
// to validate a request or to decide who takes part in it, before or
// beside calling the kind. Each kind says them once (its package's
// Traits); its controller half and its node half both return them, so
// the services never ask which kind a volume is.
type Traits struct {
	// MultiNode: a volume of the kind can be published on several nodes
	// at once (the MULTI_NODE_* access modes) when its pool is one every
	// node mounts; otherwise it is single-node whatever the pool.
	MultiNode bool
	// NodeExpansion: growing a volume takes work on its node after the
	// controller's (a filesystem to grow), so ControllerExpandVolume says
	// node_expansion_required.
	NodeExpansion bool
	// AtomicSnapshots: a snapshot is a point in time of the whole volume
	// by itself (a btrfs snapshot of a directory), with no filesystem
	// that must be frozen on the nodes that stage it.
	AtomicSnapshots bool
}
