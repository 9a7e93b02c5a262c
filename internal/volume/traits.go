package volume

// Traits are what a kind of volume can do that the services must know
// to validate a request or to decide who takes part in it, before or
// beside calling the kind. Each kind says them once (its package's
// Traits); its controller half and its node half both return them, so
// the services never ask which kind a volume is.
type Traits struct {
	// Noun names a volume of the kind for people: "image volume".
	Noun string
	// ProvisioningMode is the value of the StorageClass parameter
	// ParamProvisioningMode that makes a volume of the kind; "" for the
	// kind made when the parameter is absent.
	ProvisioningMode string
	// Block: raw block access is offered (else mount access only).
	Block bool
	// FSType: the CO chooses the filesystem a volume is formatted with
	// (else a volume is a part of a filesystem filevol does not make).
	FSType bool
	// Encryption: a volume can be encrypted at rest (ParamEncryption).
	Encryption bool
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
