package volume

import "time"

// Clone engines, as recorded in Snapshot.Engine.
const (
	// EngineReflink: FICLONE shared the source's extents. O(extents), not
	// O(data): milliseconds for gigabytes on xfs (reflink=1) and btrfs.
	EngineReflink = "reflink"
	// EngineCopy: a copy of the data ranges only (SEEK_DATA/SEEK_HOLE,
	// copy_file_range); holes stay holes, so a 10 GiB volume holding 1 GiB
	// costs 1 GiB of reads, writes and space.
	EngineCopy = "copy"
)

// Snapshot is the record of one snapshot, stored as snapshots/<id>.json
// beside its image. The image is an independent file (a reflink clone or
// a sparse copy of the volume's image): deleting the volume leaves it
// whole, deleting it never touches the volume.
type Snapshot struct {
	// Version of the record format (recordVersion).
	Version int `json:"version"`
	// ID is "fs-" + 32 hex digits of sha256(Name): a retried CreateSnapshot
	// finds its snapshot without an index (CSI: MUST be idempotent).
	ID string `json:"id"`
	// Name is the CO's name (CreateSnapshotRequest.name).
	Name string `json:"name"`
	// SourceVolumeID is the volume it was cut from.
	SourceVolumeID string `json:"sourceVolumeID"`
	// SizeBytes is the size of the image: every volume restored from it
	// is at least this large.
	SizeBytes int64 `json:"sizeBytes"`
	// RestoreBytes is what the source volume's CO asked for when it is less
	// than SizeBytes (0 otherwise): the restore size the CO is told, so a
	// claim as large as the source claim restores it even where the
	// filesystem's minimum made the image larger (RestoreSize).
	RestoreBytes int64 `json:"restoreBytes,omitempty"`
	// FSType is the source volume's filesystem type, which restores inherit.
	FSType string `json:"fsType"`
	// Encryption is the source volume's when the snapshot was cut (nil:
	// not encrypted): its data is the source's, under the same data key,
	// which restores inherit.
	Encryption *Encryption `json:"encryption,omitempty"`
	// Engine is how the image was made: EngineReflink or EngineCopy.
	Engine string `json:"engine"`
	// Parameters are the CreateSnapshot parameters as given.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Node is the node whose pool holds the snapshot.
	Node string `json:"node"`
	// GroupSnapshotID is the group snapshot the snapshot is a member of
	// ("" for none): it is visible only while that group's record is
	// (group.go), and goes only with its group.
	GroupSnapshotID string `json:"groupSnapshotID,omitempty"`
	// CreatedAt is when the snapshot was cut (CSI creation_time).
	CreatedAt time.Time `json:"createdAt"`
}

// SnapshotRequest is a validated request for a new snapshot.
type SnapshotRequest struct {
	Name           string
	SourceVolumeID string
	Parameters     map[string]string
	// GroupSnapshotID makes the snapshot a member of that group
	// (GroupMemberName names it).
	GroupSnapshotID string
	// Secrets are CreateSnapshot's (or CreateVolumeGroupSnapshot's).
	Secrets Secrets
}

// RestoreSize is the smallest request a restore of the snapshot honours
// (CSI Snapshot.size_bytes): the source claim's request, which may be less
// than the image; the restored volume is as large as the image anyway.
func (s Snapshot) RestoreSize() int64 {
	if s.RestoreBytes > 0 {
		return s.RestoreBytes
	}
	return s.SizeBytes
}
