// Package api is the wire contract of the driver's read-only
// /debug/volumes endpoint: the JSON the driver serves and that
// `kubectl filevol` reads. It is shared by both sides so they cannot drift.
//
// It holds plain types only and must not import anything of the project
// (the kubectl plugin imports it and must stay free of the driver's
// Linux-only code).
package api

import "time"

// Path is where the endpoint is served.
const Path = "/debug/volumes"

// Query parameters that narrow a Report to matching volumes.
const (
	// QueryVolume selects one volume by its ID (the PV's volumeHandle).
	QueryVolume = "volume"
	// QueryPV selects volumes whose record names that PV.
	QueryPV = "pv"
)

// Volume states, from what the kernel shows (not from the record).
const (
	// StateIdle: no loop device backs the image.
	StateIdle = "idle"
	// StateAttached: a loop device exists but no mount of it.
	StateAttached = "attached"
	// StateStaged: the filesystem is mounted at a staging path (or a block
	// volume's device is attached), nothing published.
	StateStaged = "staged"
	// StatePublished: bind-mounted into at least one pod.
	StatePublished = "published"
)

// Report is the driver's view of every volume of its pool on one node.
type Report struct {
	Node    string    `json:"node"`
	Driver  string    `json:"driver"`
	Version string    `json:"version"`
	Time    time.Time `json:"time"`
	PoolDir string    `json:"poolDir"`
	Pool    Pool      `json:"pool"`
	// Quarantine lists the images the driver found without a record and
	// moved aside (orphans). They may hold data; an operator decides.
	Quarantine []string `json:"quarantine,omitempty"`
	// LoopDevices is the number of loop devices backed by files in the pool.
	LoopDevices int      `json:"loopDevices"`
	Volumes     []Volume `json:"volumes"`
	// DirVolumes are the directory volumes (a directory pool's) with an
	// abnormal condition, such as a pod's escape from its quota that the
	// pool repaired; healthy ones are left out (a shared directory pool's
	// volumes are every node's, and have no image or device to show).
	DirVolumes []Volume `json:"dirVolumes,omitempty"`
	// Warnings are standing risks of this process's setup: on a shared
	// pool, requirements its filesystem lacks that
	// --shared-pool-unsafe-allow accepted, or a filesystem filevol does
	// not know (internal/sharedfs).
	Warnings []string `json:"warnings,omitempty"`
	// Errors are problems met while building the report (an unreadable
	// mount table, a failed statfs); the rest of the report is still valid.
	Errors []string `json:"errors,omitempty"`
}

// Pool is the pool's capacity as GetCapacity sees it.
type Pool struct {
	TotalBytes       int64 `json:"totalBytes"`
	FreeBytes        int64 `json:"freeBytes"`
	ReservedBytes    int64 `json:"reservedBytes"`
	AvailableBytes   int64 `json:"availableBytes"`
	ProvisionedBytes int64 `json:"provisionedBytes"`
}

// Volume is one volume: its record and what the kernel shows of it.
type Volume struct {
	Record Record `json:"record"`
	// PV, PVCNamespace and PVCName come from the record's parameters
	// (csi-provisioner --extra-create-metadata); empty when unknown.
	PV           string `json:"pv,omitempty"`
	PVCNamespace string `json:"pvcNamespace,omitempty"`
	PVCName      string `json:"pvcName,omitempty"`
	Image        Image  `json:"image"`
	// State is one of the State* constants.
	State       string       `json:"state"`
	LoopDevices []LoopDevice `json:"loopDevices,omitempty"`
	// Staging is the staging mount: the first mount of the volume's
	// filesystem outside pod directories (kubelet's .../globalmount), or
	// for a block volume its device bound at <staging>/device. Targets are
	// the publishes: mounts under kubelet's pods/<uid>/volumes/ or
	// volumeDevices/publish/<pv>/<uid> (PodUID set), and any other bind.
	Staging []Mount `json:"staging,omitempty"`
	Targets []Mount `json:"targets,omitempty"`
	// Usage is statfs of the staging mount (filesystem volumes only).
	Usage *Usage `json:"usage,omitempty"`
	// Health lists abnormal conditions; empty means healthy.
	Health []Condition `json:"health,omitempty"`
}

// Record mirrors the volume's record in the pool.
type Record struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacityBytes"`
	FSType        string            `json:"fsType,omitempty"`
	Provisioning  string            `json:"provisioning"`
	Parameters    map[string]string `json:"parameters,omitempty"`
	Node          string            `json:"node"`
	CreatedAt     time.Time         `json:"createdAt"`
	// Encryption is the scheme the volume's data is encrypted with at
	// rest ("fscrypt"), "" when it is not encrypted. Never a key.
	Encryption string `json:"encryption,omitempty"`
	// EncryptionKeyMade: the volume's data key exists (made at its first
	// stage), wrapped in the record by its Secret's key.
	EncryptionKeyMade bool `json:"encryptionKeyMade,omitempty"`
}

// Image is the volume's image file.
type Image struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	// Pending: a blank volume whose image is made at its first use (stage,
	// snapshot, clone, expansion); until then it may not exist, and that
	// is not a loss.
	Pending bool `json:"pending,omitempty"`
	// SizeBytes is the file's apparent size; AllocatedBytes what it really
	// occupies in the pool (a sparse image allocates on write).
	SizeBytes      int64 `json:"sizeBytes"`
	AllocatedBytes int64 `json:"allocatedBytes"`
}

// LoopDevice is one loop device backed by the image.
type LoopDevice struct {
	Path      string `json:"path"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	DirectIO  bool   `json:"directIO,omitempty"`
	SizeBytes int64  `json:"sizeBytes"`
	// Deleted: the image was unlinked while the device held it.
	Deleted bool `json:"deleted,omitempty"`
}

// Mount is one mount of the volume.
type Mount struct {
	Path     string `json:"path"`
	FSType   string `json:"fsType"`
	Device   string `json:"device,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// PodUID is the pod a target belongs to (from kubelet's path layout).
	PodUID string `json:"podUID,omitempty"`
}

// Usage is a mounted filesystem's usage.
type Usage struct {
	TotalBytes     int64 `json:"totalBytes"`
	UsedBytes      int64 `json:"usedBytes"`
	AvailableBytes int64 `json:"availableBytes"`
	TotalInodes    int64 `json:"totalInodes,omitempty"`
	UsedInodes     int64 `json:"usedInodes,omitempty"`
}

// Condition is one abnormal health condition, as the CSI health RPCs
// report it (Status is the CSI error type, Reason a CamelCase constant such
// as ImageMissing or LoopDeviceGone).
type Condition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}
