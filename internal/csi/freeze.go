package csi

import (
	"context"
	"errors"
	"fmt"

	"github.com/filevol/filevol/internal/freeze"
)

// withFrozen runs fn — a clone of volume id's image — with the volume's
// filesystem frozen (FIFREEZE) on every node that has it staged with a
// filesystem, so the clone holds a consistent filesystem, not a crash
// image. The controller cannot freeze it itself: the filesystem is
// mounted on a node, which may be another host. It asks that node through
// the pool (internal/freeze) and the node freezes, holding the volume's
// node lock (so an unstage waits), and thaws when fn is done.
//
// A volume staged nowhere, or staged as a block device, is cloned as it
// is: crash-consistent with reflink, which is atomic; the CO quiesces the
// application if it needs more. The caller holds id's controller lock;
// st is the volume's store, in whose pool its nodes are asked.
func (s *ControllerService) withFrozen(ctx context.Context, st *poolStore, id string, fn func() error) error {
	if st.Traits().AtomicSnapshots {
		// A btrfs snapshot of a directory volume is atomic: a point in time
		// of the whole subvolume, with no filesystem of its own to freeze.
		return fn()
	}
	staged, err := st.inuse.Of(id)
	if err != nil {
		return err
	}
	run := fn
	for _, e := range staged {
		if e.Block {
			continue
		}
		node, inner := e.Node, run
		run = func() error { return st.freezer.Hold(ctx, id, node, inner) }
	}
	if err = run(); isFreezeError(err) {
		// errors.go maps each to its code; the volume is named here.
		return fmt.Errorf("freeze volume %s for a consistent copy: %w", id, err)
	}
	return err
}

func isFreezeError(err error) bool {
	for _, e := range []error{freeze.ErrBusy, freeze.ErrNodeUnavailable, freeze.ErrNoSpace, freeze.ErrFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
