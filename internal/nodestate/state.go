package nodestate

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
)

// Names of the markers, unchanged since they were first written (see the
// package doc).
const (
	formatSuffix = ".formatting"
	growSuffix   = ".growing"
	// FrozenDir is the directory of the freeze marks in the pool.
	FrozenDir = "frozen"
)

// State is the node-side state of one node kept in a pool directory.
type State struct {
	// Format marks a volume whose first mkfs is in progress. mkfs is not
	// atomic: a crash in the middle can leave a device whose signature is
	// already there but whose filesystem cannot be mounted ("structure
	// needs cleaning"), and filevol never formats a device that carries a
	// signature. The marker is what tells "our own mkfs was interrupted,
	// do it again" apart from "this holds someone's data": it is durable
	// before mkfs starts and durably gone before the filesystem is first
	// mounted, so no data is ever written while it exists.
	Format *Marker
	// Grow marks a volume whose filesystem is being grown offline
	// (resize2fs on the unmounted device). Unlike online growth, which
	// the kernel journals, offline resize2fs is not atomic: killed half-way
	// (a container restart kills it with the driver) it leaves a
	// filesystem that e2fsck -p refuses to repair ("UNEXPECTED
	// INCONSISTENCY"). The marker tells "our own resize was interrupted:
	// repair it (e2fsck -y) and resize again" apart from damage of unknown
	// origin, which is never repaired blindly. Durable before resize2fs
	// starts and once it is removed.
	Grow *Marker
	// Frozen names a volume whose filesystem the driver froze (FIFREEZE)
	// to clone it and has not thawed yet. A frozen filesystem is kernel
	// state that outlives the process that froze it: a driver killed
	// between freeze and thaw leaves every writer of the pod blocked, and
	// nobody else knows to thaw it. The mark is how the next start knows.
	//
	// Marks are empty (no data block: a snapshot on a full pool, which
	// reflink can still cut, must not fail for want of one) and not
	// fsynced: they only have to survive the death of the process, which
	// the page cache does, and a snapshot of a mounted volume pays no
	// directory fsync for them. A machine that crashes thaws every
	// filesystem by rebooting, and a mark left over then names a
	// filesystem that is not frozen, which thawing leaves alone.
	Frozen *Marker

	// legacyFrozen is <pool>/frozen on a shared pool, whose marks
	// AdoptLegacyFrozen hands to their node; nil on a node-local pool.
	legacyFrozen *Marker
}

// Open returns the state of the node-local pool at poolDir, whose
// volumes/ exists, and makes its frozen/ directory if missing. valid
// accepts the volume IDs (every other name is none of this package's).
func Open(poolDir string, valid func(id string) error) (*State, error) {
	return open(poolDir, filepath.Join(poolDir, FrozenDir), valid)
}

// OpenShared is Open for a pool that several hosts share: the node's
// freeze marks live in nodeDir, the directory the pool keeps for this
// node (<pool>/owners/<node key>), made if missing, so that no node sees,
// thaws or drops another's (see the package doc).
func OpenShared(poolDir, nodeDir string, valid func(id string) error) (*State, error) {
	s, err := open(poolDir, filepath.Join(nodeDir, FrozenDir), valid)
	if err != nil {
		return nil, err
	}
	s.legacyFrozen = &Marker{dir: filepath.Join(poolDir, FrozenDir), valid: valid}
	return s, nil
}

func open(poolDir, frozenDir string, valid func(id string) error) (*State, error) {
	vdir := filepath.Join(poolDir, "volumes")
	if err := durable.EnsureDir(frozenDir); err != nil {
		return nil, fmt.Errorf("node state: %w", err)
	}
	return &State{
		Format: &Marker{dir: vdir, suffix: formatSuffix, durable: true, valid: valid},
		Grow:   &Marker{dir: vdir, suffix: growSuffix, durable: true, valid: valid},
		Frozen: &Marker{dir: frozenDir, durable: false, valid: valid},
	}, nil
}

// AdoptLegacyFrozen moves into this node's directory the freeze marks
// that the pool's node-local layout holds (<pool>/frozen) and that mine
// says are this node's: a shared pool that was node-local once keeps the
// marks its only node left, and that node, restarted on the shared pool,
// must still thaw what they name. The others are left where they are,
// for their node. A no-op on a node-local pool, whose marks are there.
func (s *State) AdoptLegacyFrozen(mine func(id string) bool) error {
	if s.legacyFrozen == nil {
		return nil
	}
	ids, err := s.legacyFrozen.IDs()
	if err != nil {
		return fmt.Errorf("node state: %w", err)
	}
	for _, id := range ids {
		if !mine(id) {
			continue
		}
		// No replace: a mark of our own is there already, the same fact.
		err := durable.RenameNoReplace(s.legacyFrozen.Path(id), s.Frozen.Path(id))
		if errors.Is(err, unix.EEXIST) {
			err = s.legacyFrozen.Clear(id)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("node state: adopt the freeze mark of volume %s: %w", id, err)
		}
	}
	return nil
}

// ForgetVolume removes the markers a deleted volume may have left in
// volumes/, without an fsync of its own: the caller (the pool's delete)
// fsyncs volumes/ after. A format marker must never outlive its volume:
// a later volume of the same name (same ID) would have its data taken for
// a half-made mkfs.
func (s *State) ForgetVolume(id string) {
	if s.Format.valid(id) != nil {
		return
	}
	_ = unix.Unlink(s.Format.Path(id))
	_ = unix.Unlink(s.Grow.Path(id))
}

// VolumeMarker reports whether name, in volumes/, is a marker of this
// package: the pool's scan leaves it alone.
func (s *State) VolumeMarker(name string) bool {
	_, f := s.Format.idOf(name)
	_, g := s.Grow.idOf(name)
	return f || g
}
