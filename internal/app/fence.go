package app

import (
	"github.com/filevol/filevol/internal/cephevict"
	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/sharedfs"
	"github.com/filevol/filevol/internal/volume"
)

// withFence wires the fence by eviction of a shared pool whose filesystem
// names its clients (kind, as checkSharedFS found it; CephFS only): a
// controller evicts a force-detached node's client with the credentials
// of the request's secrets (internal/cephevict, through po.Fence), and a
// node records its client with each volume it stages (the function
// returned, for csi.Config.StorageClient). Nil, and po unchanged, on
// every other filesystem.
func withFence(o options.Options, kind sharedfs.Kind, po *pool.Options) func() (volume.StorageClient, bool, error) {
	if !o.PoolShared || kind != sharedfs.KindCephFS {
		return nil
	}
	if o.Mode != options.ModeNode {
		e := &cephevict.Evictor{Mount: o.PoolDir, Monitors: func(dir string) (string, string, error) {
			return sharedfs.CephMonitors(dir, sharedfs.Options{CephSocketDirs: o.CephAdminSocketDirs})
		}}
		po.Fence = e.Evict
	}
	if o.Mode == options.ModeController {
		return nil
	}
	return func() (volume.StorageClient, bool, error) { return sharedfs.ClientOf(kind, o.PoolDir) }
}
