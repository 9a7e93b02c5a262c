package volume

import (
	"time"
)

// Provisioning modes of CreateRequest.Provisioning and Volume.Provisioning.
const (
	// ProvisioningThin: a sparse image; blocks are allocated on write, so
	// volumes may together promise more than the pool holds.
	ProvisioningThin = "thin"
	// ProvisioningThick: every block allocated (fallocate) at create.
	ProvisioningThick = "thick"
)

// MaxNameLen is the longest volume name accepted, in bytes. The name never
// becomes a path (only its hash does), so it only bounds record size.
const MaxNameLen = 1024

// Volume is the record of one volume, stored as <id>.json.
type Volume struct {
	// Version of the record format.
	Version int `json:"version"`
	// ID is the volume ID handed to the CO (internal/volid): it names the
	// pool and the kind of volume, and holds a hash of Name, so a retried
	// CreateVolume finds its volume without an index.
	ID string `json:"id"`
	// Name is the CO's name for the volume (CreateVolumeRequest.name).
	Name string `json:"name"`
	// CapacityBytes is the size of the image file.
	CapacityBytes int64 `json:"capacityBytes"`
	// RequestedBytes is the size the CO asked for (rounded to the
	// allocation unit), which may be less than CapacityBytes: a filesystem
	// has a minimum (xfs 300 MiB). A snapshot reports it as its restore
	// size, so a claim of the size its source claim asked for can restore
	// it. 0 (records written before it existed): CapacityBytes.
	RequestedBytes int64 `json:"requestedBytes,omitempty"`
	// FSType is the filesystem made at first stage for mount access.
	FSType string `json:"fsType"`
	// Provisioning is "thin" (sparse) or "thick" (fallocated).
	Provisioning string `json:"provisioning"`
	// Parameters are the CreateVolume parameters as given, compared on a
	// retried create (CSI spec: same name + different parameters →
	// ALREADY_EXISTS).
	Parameters map[string]string `json:"parameters,omitempty"`
	// Node is the node whose pool holds the volume.
	Node string `json:"node"`
	// ContentSource is the snapshot or volume the image was cloned from
	// (nil: created empty). Records without it (version 1 written before
	// snapshots existed) read as empty volumes.
	ContentSource *ContentSource `json:"contentSource,omitempty"`
	// CreatedAt is when the record was first written.
	CreatedAt time.Time `json:"createdAt"`
	// ImagePending: the image was created blank and not yet made durable;
	// until its first use clears the mark (CommitImage), Open remakes an
	// image a crash lost (pending.go). Records without it read as false.
	ImagePending bool `json:"imagePending,omitempty"`
	// QoS are the volume's I/O limits, set at create and changed by
	// SetQoS (ControllerModifyVolume); the node enforces them on the
	// cgroups of the pods that use the volume. nil (records written
	// before limits existed, or a volume never limited): no limits.
	QoS *QoS `json:"qos,omitempty"`
	// Encryption: the volume's data is encrypted at rest, and this keeps
	// its wrapped data key (encryption.go). nil: not encrypted.
	Encryption *Encryption `json:"encryption,omitempty"`
	// Context is the volume context CreateVolume returns (not stored: a
	// store that has one derives it from its own record, as the
	// directory pool says whether a size is enforced).
	Context map[string]string `json:"-"`
}

// CreateRequest is a validated request for a new volume. An empty
// Provisioning means ProvisioningThin.
type CreateRequest struct {
	Name          string
	CapacityBytes int64
	// RequestedBytes is what the CO asked for (0: CapacityBytes); see
	// Volume.RequestedBytes.
	RequestedBytes int64
	FSType         string
	Provisioning   string
	Parameters     map[string]string
	// Source, when set, makes the image a clone of a snapshot or volume of
	// this pool (reflink, else a hole-preserving copy), grown to
	// CapacityBytes, which must not be smaller than the source.
	Source *ContentSource
	// QoS are the volume's I/O limits (nil or zero: none).
	QoS *QoS
	// Encryption is the scheme the volume's data is encrypted with
	// (EncryptionFscrypt; "": none). A volume made from a source must be
	// encrypted as its source is, and carries its data key.
	Encryption string
	// Secrets are CreateVolume's (the provisioner Secret), for a backend
	// that needs key material to make the volume.
	Secrets Secrets
}

// Capacity is what the pool can still hold.
type Capacity struct {
	// TotalBytes and FreeBytes are statfs of the pool filesystem (free as
	// available to unprivileged writers).
	TotalBytes, FreeBytes int64
	// ReservedBytes is kept free on purpose (--reserved-capacity).
	ReservedBytes int64
	// UnbackedBytes is what thick volumes were promised but do not hold
	// exclusively: extents shared with a snapshot or clone (reflink), which
	// the next write must copy, and holes punched by discard. The free
	// space must keep it for them: thick means reserved.
	UnbackedBytes int64
	// AvailableBytes = FreeBytes - ReservedBytes - UnbackedBytes, never
	// negative: what can still be promised.
	AvailableBytes int64
	// ProvisionedBytes is the sum of every volume's capacity.
	ProvisionedBytes int64
}

// Requested is the size the CO asked for: RequestedBytes, or the capacity
// when the record does not say.
func (v Volume) Requested() int64 {
	if v.RequestedBytes > 0 {
		return v.RequestedBytes
	}
	return v.CapacityBytes
}
