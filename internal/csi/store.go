package csi

import (
	"context"

	"github.com/filevol/filevol/internal/pool"
)

// VolumeStore is what the controller service asks of a pool: its records
// and the operations on a volume's data, never a path or a device.
// *pool.Pool implements it for image volumes on a node's pool; another
// kind of pool (a shared image pool, a directory pool with quotas)
// implements it too, and the services do not change.
type VolumeStore interface {
	// Dir is where the pool lives; the in-use records and the freeze
	// requests that controller and nodes exchange live under it.
	Dir() string
	// VolumeID and SnapshotID are the IDs the pool gives names: they
	// name the pool and the kind of volume (internal/volid).
	VolumeID(name string) string
	SnapshotID(name string) string
	Known(id string) bool
	Get(id string) (pool.Volume, error)
	GetByName(name string) (pool.Volume, error)
	Create(ctx context.Context, req pool.CreateRequest) (pool.Volume, error)
	Delete(ctx context.Context, id string) error
	List() []pool.Volume
	Expand(ctx context.Context, id string, size, requested int64) (pool.Volume, error)
	Capacity() (pool.Capacity, error)
	// ImageLost: the volume's data is gone (not merely not made yet).
	ImageLost(id string) bool

	CreateSnapshot(ctx context.Context, req pool.SnapshotRequest) (pool.Snapshot, error)
	GetSnapshot(id string) (pool.Snapshot, error)
	GetSnapshotByName(name string) (pool.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	ListSnapshots() []pool.Snapshot
}

var _ VolumeStore = (*pool.Pool)(nil)
