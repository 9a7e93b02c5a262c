package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volume"
)

// NodeBackend is the node's half of one kind of volume in one pool: the
// work on this node's kernel that staging, publishing, measuring and
// growing a volume of that kind takes (for an image volume: loop devices,
// mkfs, mounts and binds; internal/pool/imagenode). What every kind shares is the
// NodeService's, done before a backend is called, so a new kind does not
// repeat it and cannot get it wrong:
//
//   - the request is validated: the volume ID's shape, every path under
//     the path policy (cleaned), the capability and its mount flags;
//   - the volume is locked (ABORTED while another call holds it);
//   - it is routed by the pool and kind its ID names (routes.go), and
//     looked up (Get): a backend's methods get the volume's record;
//   - a stage is recorded in the pool's in-use records before the
//     backend runs, and dropped when it fails and nothing of the volume
//     is left on this node (InUse);
//   - calls are logged, and errors become gRPC codes in one place
//     (errors.go): a backend returns the named errors of pool and hostos,
//     or chooses a code (failedPrecondition, alreadyExists, ...).
//
// Every method must be idempotent, as the spec asks of the calls: a retry
// finds what the last call made and succeeds. A method that fails leaves
// nothing half-made that a retry would not complete.
type NodeBackend interface {
	// Dir is where the pool lives: the in-use records are under it.
	Dir() string
	// Traits says what the kind can do (the same as its VolumeStore's).
	Traits() volume.Traits
	// Get returns the volume's record, volume.ErrNotFound when it has none.
	Get(id string) (volume.Volume, error)
	// InUse reports whether this node's kernel holds anything of the
	// volume (an attached device, a mount): the node keeps its in-use
	// record while it does.
	InUse(id string) (bool, error)
	// Stage makes the volume staged at r.StagingPath and returns what the
	// staging path holds (a device, a directory), for the log.
	Stage(ctx context.Context, vol volume.Volume, r volume.StageRequest) (string, error)
	// Unstage undoes Stage; FAILED_PRECONDITION while the volume is still
	// published. Also for a volume whose record is gone.
	Unstage(ctx context.Context, id, staging string) error
	// Publish makes the staged volume available at r.TargetPath.
	Publish(ctx context.Context, vol volume.Volume, r volume.PublishRequest) error
	// Unpublish undoes Publish and removes the target (spec: the SP
	// deletes what it made). Also for a volume whose record is gone.
	Unpublish(ctx context.Context, id, target string) error
	// Stats measures the volume published or staged at path, an existing
	// path: NOT_FOUND when what is there is not the volume.
	Stats(ctx context.Context, vol volume.Volume, path string) ([]*csipb.VolumeUsage, error)
	// Expand makes the volume, staged or published at r.VolumePath, use
	// the size its record says, growing it first when the request asks
	// for more (a controller that deferred the expansion to the node);
	// it returns the volume's size.
	Expand(ctx context.Context, vol volume.Volume, r volume.ExpandRequest) (int64, error)
	// Health lists the volume's adverse conditions on this node, looking
	// at the given paths too when they are not "".
	Health(ctx context.Context, vol volume.Volume, publishPath, stagingPath string) ([]*csipb.VolumeHealth_VolumeHealthEntry, error)
}

// Optional parts of a backend, for kinds that have them.
type (
	// freezePointer finds the mount point to freeze for a consistent
	// snapshot or clone (the freeze agent's MountPoint); a kind without
	// one is copied as it is.
	freezePointer interface {
		FreezePoint(id string) (string, error)
	}
	// stagedFinder finds in the kernel the volumes of its kind staged on
	// this node, so that the node records those no in-use record names
	// (staged by a filevol that kept no records): Attached lists the
	// volumes with something attached here, StagedEntry says how one is
	// staged (false: nothing uses what is attached).
	stagedFinder interface {
		Attached() ([]string, error)
		StagedEntry(id string) (inuse.Entry, bool, error)
	}
	// listingFinder is a stagedFinder that finds the volumes attached
	// here in a listing of the loop devices the caller holds (a sweep's),
	// instead of listing them again.
	listingFinder interface {
		AttachedIn(devs []loop.Device) []string
	}
	// deviceNoter is a kind staged through a loop device of this node's
	// kernel, which its Stage returns (the image kind), so that on a
	// shared pool the node tells the controller, in its in-use records,
	// which device holds a volume and a detach of it that waits for its
	// holders (node_devices.go).
	deviceNoter interface {
		// DevicesIn returns, by volume, this node's device in devs of
		// each volume want asks about and of each whose device's detach
		// is pending (that device first).
		DevicesIn(devs []loop.Device, want func(id string) bool) map[string]loop.Device
		// PendingDetach reads the device again: whether its detach is
		// still pending, and what holds it open.
		PendingDetach(id string, d loop.Device) (holders string, pending bool, err error)
	}
)
