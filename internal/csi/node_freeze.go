package csi

import (
	"github.com/filevol/filevol/internal/freeze"
)

// FreezeAgent returns this node's answerer of the controllers' freeze
// requests (internal/freeze): it freezes the filesystem of a volume
// staged here under the volume's node lock, so NodeUnstageVolume waits
// until it is thawed. The caller runs it (Run) for the node's lifetime.
func (s *NodeService) FreezeAgent() *freeze.Agent {
	a := freeze.NewAgent(s.pool.Dir(), s.cfg.NodeID)
	a.MountPoint = s.freezePoint
	a.Freeze = s.host.FS.Freeze
	a.Thaw = s.host.FS.Thaw
	a.TryLock = func(id string) (func(), error) { return s.locks.tryLock(frozenKey(id)) }
	a.PoolFull = func() bool {
		c, err := s.pool.Capacity()
		return err == nil && c.FreeBytes < allocationUnit
	}
	a.Marks = frozenMarks{s}
	return a
}

// frozenKey is the lock the freeze agent holds while a volume's
// filesystem is frozen, and every node call takes besides the volume's
// own. Not the volume's own key: in one process (--mode all) the
// controller holds that one while it waits for the freeze.
func frozenKey(id string) string { return "frozen/" + id }

// freezePoint returns the mount point to freeze of the volume's
// filesystem on this node, from the volume's backend: "" (nothing to
// freeze, the copy is taken as it is) when the backend has no filesystem
// to freeze, or when no volume of that ID can be staged here.
func (s *NodeService) freezePoint(id string) (string, error) {
	nv, err := s.vols.volume(id)
	if err != nil {
		return "", nil
	}
	f, ok := nv.NodeBackend.(freezePointer)
	if !ok {
		return "", nil
	}
	return f.FreezePoint(id)
}

// frozenMarks are the node's freeze marks, kept in the pool (nodestate).
// Only the node's agent sets them, and one agent runs per node and pool:
// every mark it finds when it starts is a dead predecessor's, whoever
// else has the pool open (a controller process does, in split mode).
// On a pool that several nodes share, each node's marks are its own
// (<pool>/owners/<node key>/frozen, internal/nodestate): a node's start
// thaws only what it froze.
type frozenMarks struct{ s *NodeService }

func (m frozenMarks) Mark(id string) error    { return m.s.pool.NodeState().Frozen.Set(id) }
func (m frozenMarks) Unmark(id string) error  { return m.s.pool.NodeState().Frozen.Clear(id) }
func (m frozenMarks) List() ([]string, error) { return m.s.pool.NodeState().Frozen.IDs() }
