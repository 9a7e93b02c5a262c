package dirpool

import (
	"context"
	"fmt"

	"github.com/filevol/filevol/internal/pool"
)

// Modify is ControllerModifyVolume for a directory volume. Its size is
// its quota and it has no image: neither I/O limits (which throttle an
// image's loop device) nor a provisioning mode apply. The same nothing
// again is success (idempotent); anything else is refused, naming it,
// and nothing is changed.
func (p *Pool) Modify(ctx context.Context, id string, m pool.Modification) (pool.Volume, error) {
	v, err := p.Get(id)
	if err != nil {
		return pool.Volume{}, err
	}
	if m.QoS != (pool.QoS{}) {
		return pool.Volume{}, fmt.Errorf("%w: I/O limits apply to image volumes (their loop device); directory volume %s has none", ErrInvalidParameter, id)
	}
	if m.Provisioning != "" {
		return pool.Volume{}, fmt.Errorf("%w: provisioning %q applies to image volumes; directory volume %s is sized by its quota", ErrInvalidParameter, m.Provisioning, id)
	}
	return v, nil
}
