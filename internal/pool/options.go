package pool

import (
	"context"
	"time"

	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/volume"
)

// Options configures Open.
type Options struct {
	// NodeID is written into every record.
	NodeID string
	// ReservedBytes is kept free and never promised.
	ReservedBytes int64
	// Shared: several hosts open the pool directory (a filesystem every
	// node mounts). Nobody then holds the pool alone, so repair at open
	// touches only this process's owner's temporary files (lock.go), the
	// node's freeze marks are its own (internal/nodestate), and an image
	// without a record is quarantined only once it has not changed for
	// OrphanGrace. False (the default): a node-local pool, repaired whole
	// by the process that holds it alone, as it always was. Opening a
	// pool as shared marks it so (pool.json): node-local opens of it are
	// refused from then on.
	Shared bool
	// Owner names this process among those that open a shared pool: the
	// node ID for a node (the default when empty), a controller's identity
	// for a controller. Its key (poolowner.Key) tags the temporary files of
	// the process's operations and names the node's directory of state. Two
	// processes of one owner never repair at once (an owner lock); an
	// owner's leftovers are repaired only by a later open of that owner.
	// Unused on a node-local pool.
	Owner string
	// OrphanGrace (shared pools) is how long an image without a record
	// must have been unchanged before the garbage collector quarantines
	// it; 0 means DefaultOrphanGrace.
	OrphanGrace time.Duration
	// Fence, on a controller of a shared pool whose filesystem can cut a
	// node's client off (CephFS: internal/cephevict), does so for
	// FenceClient; nil elsewhere.
	Fence func(ctx context.Context, req volume.FenceRequest) error
}

// DefaultOrphanGrace is the default of Options.OrphanGrace: far longer
// than any shared filesystem keeps a stale view of a directory (NFS
// caches attributes for 60 s at most by default, GlusterFS's FUSE client
// a few seconds), so an image it shows without a record that old is not
// a create whose record this host does not see yet (orphans.go).
const DefaultOrphanGrace = 10 * time.Minute

// DeviceOwner is what a node writes into the loop devices it attaches
// (loop.Options.Owner): "filevol/" and the node's owner key, within the
// 63 bytes the device keeps. The node half attaches with it; the node's
// garbage collector tells its own devices from other nodes' by it.
func DeviceOwner(node string) string { return "filevol/" + poolowner.Key(node) }
