package pool

import (
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/volume"
)

// Traits are the image kind's: single-node (one writer's filesystem or
// block device, attached on one node at a time), grown on the node too
// (the filesystem in the image), snapshotted with the filesystems that
// stage it frozen.
var Traits = volume.Traits{Noun: "image volume", Block: true, FSType: true, Encryption: true, NodeExpansion: true}

// Traits says what image volumes can do (volume.Traits).
func (p *Pool) Traits() volume.Traits { return Traits }

// KnownNode reports whether node has opened the pool (poolowner.Known).
func (p *Pool) KnownNode(node string) bool { return poolowner.Known(p.dir, node) }

// NodeClient is what node noted of its client of the pool's filesystem
// (poolowner.NoteClient), for the controller's attachment record: false
// when it noted none.
func (p *Pool) NodeClient(node string) (volume.StorageClient, bool, error) {
	c, ok, err := poolowner.ClientOf(p.dir, node)
	return volume.StorageClient{Kind: c.Kind, ID: c.ID, Cluster: c.Cluster}, ok, err
}
