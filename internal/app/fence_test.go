package app

import (
	"testing"

	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/sharedfs"
)

// The fence by eviction is wired on a shared pool on CephFS only: the
// controller gets the evictor, the node the reading of its client; on
// GlusterFS, local and other filesystems, and on a node-local pool,
// nothing.
func TestWithFenceOnCephFSOnly(t *testing.T) {
	for _, c := range []struct {
		shared           bool
		kind             sharedfs.Kind
		mode             string
		fence, recording bool
	}{
		{true, sharedfs.KindCephFS, options.ModeController, true, false},
		{true, sharedfs.KindCephFS, options.ModeNode, false, true},
		{true, sharedfs.KindCephFS, options.ModeAll, true, true},
		{true, sharedfs.KindGlusterFS, options.ModeAll, false, false},
		{true, sharedfs.KindLocal, options.ModeAll, false, false},
		{true, sharedfs.KindOther, options.ModeAll, false, false},
		{false, sharedfs.KindCephFS, options.ModeAll, false, false},
	} {
		var po pool.Options
		rec := withFence(options.Options{PoolShared: c.shared, Mode: c.mode, PoolDir: t.TempDir()}, c.kind, &po)
		if (po.Fence != nil) != c.fence || (rec != nil) != c.recording {
			t.Errorf("shared %v on %s, mode %s: fence %v, recording %v; want %v, %v", c.shared, c.kind, c.mode, po.Fence != nil, rec != nil, c.fence, c.recording)
		}
	}
}
