package app

import (
	"sync"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/cephevict"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/sharedfs"
	"github.com/filevol/filevol/internal/volume"
)

// withFence wires the fence by eviction of a shared pool whose filesystem
// names its clients (kind, as checkSharedFS found it; CephFS only): a
// controller evicts a force-detached node's client with the credentials
// of the request's secrets (internal/cephevict, through po.Fence), and a
// node reads its client (the function returned, for
// csi.Config.StorageClient: each stage records it with the volume), and
// notes it in its directory of the pool when it changed, where the
// controller reads it at every attach (noteClient). Nil, and po
// unchanged, on every other filesystem.
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
	return noteClient(o.PoolDir, o.NodeID, func() (volume.StorageClient, bool, error) { return sharedfs.ClientOf(kind, o.PoolDir) })
}

// noteClient returns read, which also notes the client it reads as node's
// in the pool at dir (poolowner.NoteClient) when it differs from the last
// noted: the pool's open announced the node, Run calls it once then, and
// every stage calls it, so a client mounted again is noted at the next
// stage. A failure to note is logged: the controller then records no
// client at the attach, and fences a silent node only once the
// filesystem lets it read the node's records (controller_evict.go).
func noteClient(dir, node string, read func() (volume.StorageClient, bool, error)) func() (volume.StorageClient, bool, error) {
	var mu sync.Mutex
	var noted volume.StorageClient
	return func() (volume.StorageClient, bool, error) {
		c, ok, err := read()
		if err != nil || !ok {
			return c, ok, err
		}
		mu.Lock()
		defer mu.Unlock()
		if c != noted {
			if err := poolowner.NoteClient(dir, node, inuse.Client{Kind: c.Kind, ID: c.ID, Cluster: c.Cluster}); err != nil {
				klog.ErrorS(err, "note this node's client of the pool for the controller's attachments", "client", c.ID)
			} else {
				noted = c
			}
		}
		return c, true, nil
	}
}
