package volume

import "errors"

// The named errors every kind of volume returns for the same failures;
// internal/csi/errors.go maps each to a gRPC code (a kind's own errors
// are its package's, mapped there too).
var (
	// ErrNotFound: no volume with that ID (or name).
	ErrNotFound = errors.New("volume not found")
	// ErrAlreadyExists: a volume with that name exists with other parameters.
	ErrAlreadyExists = errors.New("volume already exists with different parameters")
	// ErrNoSpace: the pool cannot hold the volume.
	ErrNoSpace = errors.New("not enough space in the pool")
	// ErrInvalidID: an ID that cannot be one (so it names nothing, and
	// never becomes a path).
	ErrInvalidID = errors.New("invalid volume ID")
	// ErrInvalidArgument: a request field out of range (a name empty, too
	// long or not UTF-8, capacity not positive, unknown provisioning,
	// thick on a filesystem that cannot preallocate, a content source of
	// an unknown kind or larger than the volume).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrGroupNotFound: no group snapshot with that ID (or its delete has
	// begun).
	ErrGroupNotFound = errors.New("group snapshot not found")
	// ErrInGroup: the snapshot is a member of a group snapshot and goes
	// only with its group (CSI DeleteSnapshot: "Snapshot is part of a
	// group", INVALID_ARGUMENT).
	ErrInGroup = errors.New("snapshot is part of a group snapshot")
	// ErrSnapshotNotFound: no snapshot with that ID (or name).
	ErrSnapshotNotFound = errors.New("snapshot not found")
	// ErrShrink: a volume cannot be made smaller (CSI: OUT_OF_RANGE). Its
	// filesystem may use every byte; filevol never truncates data away.
	ErrShrink = errors.New("volumes cannot shrink")
	// ErrImageMissing: the record exists but the volume's data (an image
	// file, a directory) is gone, so there is nothing to stage, snapshot
	// or clone.
	ErrImageMissing = errors.New("image file missing")
)
