package volume

// Kinds of ContentSource.
const (
	SourceSnapshot = "snapshot"
	SourceVolume   = "volume"
)

// ContentSource names what a volume was cloned from (CSI
// VolumeContentSource): a snapshot ID or a volume ID of this pool.
type ContentSource struct {
	// Kind is SourceSnapshot or SourceVolume.
	Kind string `json:"kind"`
	// ID is the snapshot or volume ID.
	ID string `json:"id"`
}
