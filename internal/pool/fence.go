package pool

import (
	"context"
	"errors"

	"github.com/filevol/filevol/internal/volume"
)

// FenceClient cuts a node's client off the pool's storage, so that its
// loop device lets go of the image (Options.Fence: the controller of a
// shared pool on CephFS evicts the client). errors.ErrUnsupported where
// the pool has no such fence.
func (p *Pool) FenceClient(ctx context.Context, req volume.FenceRequest) error {
	if p.opts.Fence == nil {
		return errors.ErrUnsupported
	}
	return p.opts.Fence(ctx, req)
}
