package dirpool

import (
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/volume"
)

// Traits are the directory kind's: a directory can be bound on every
// node that mounts its pool, grows by its quota alone, and its snapshot
// (a btrfs snapshot of its subvolume) is atomic by itself.
var Traits = volume.Traits{Noun: "directory volume", ProvisioningMode: volume.ProvisioningModeDirectory,
	MultiNode: true, AtomicSnapshots: true}

// CheckParameters refuses StorageClass parameters a directory volume
// cannot be made with (Parameters), before anything is made.
func (p *Pool) CheckParameters(params map[string]string) error {
	_, err := Parameters(params)
	return err
}

// KnownNode reports whether node has opened the pool: a node of a shared
// directory pool announces itself as the image pool's nodes do.
func (p *Pool) KnownNode(node string) bool { return poolowner.Known(p.Dir(), node) }

// Traits says what directory volumes can do (volume.Traits).
func (p *Pool) Traits() volume.Traits { return Traits }
