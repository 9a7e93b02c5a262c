package dirpool

import "github.com/filevol/filevol/internal/volume"

// Traits are the directory kind's: a directory can be bound on every
// node that mounts its pool, grows by its quota alone, and its snapshot
// (a btrfs snapshot of its subvolume) is atomic by itself.
var Traits = volume.Traits{MultiNode: true, AtomicSnapshots: true}

// Traits says what directory volumes can do (volume.Traits).
func (p *Pool) Traits() volume.Traits { return Traits }
