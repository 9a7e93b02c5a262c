package volume

// StageRequest is a validated NodeStageVolume.
type StageRequest struct {
	StagingPath string
	// Block: raw block access; else a filesystem of FSType ("" for the
	// one the volume was made with), mounted with MountFlags.
	Block      bool
	FSType     string
	MountFlags []string
	// ReadOnly: the access mode allows no writer.
	ReadOnly bool
	// Unrecorded: this node had no in-use record of the volume before
	// this stage. The record is written before anything is attached and
	// dropped only after the detach, so no earlier stage of this node
	// can have left a device that is still attaching or attached, except
	// one whose detach the kernel deferred (another process holds it
	// open), which a lock probe finds (the image kind's ensureLoop, internal/pool/imagenode).
	Unrecorded bool
	// Secrets are NodeStageVolume's (the node-stage Secret).
	Secrets Secrets
}

// PublishRequest is a validated NodePublishVolume.
type PublishRequest struct {
	StagingPath, TargetPath string
	Block                   bool
	MountFlags              []string
	// ReadOnly: the request or the access mode asks for it.
	ReadOnly bool
	// SingleWriter: SINGLE_NODE_SINGLE_WRITER, so no other target may
	// have the volume published.
	SingleWriter bool
	// Secrets are NodePublishVolume's (the node-publish Secret).
	Secrets Secrets
}

// ExpandRequest is a validated NodeExpandVolume; StagingPath may be "".
type ExpandRequest struct {
	VolumePath, StagingPath   string
	RequiredBytes, LimitBytes int64
	// Secrets are NodeExpandVolume's (the node-expand Secret).
	Secrets Secrets
}
