package dirpool

import (
	"context"
	"fmt"

	"github.com/filevol/filevol/internal/volume"
)

// Modify is ControllerModifyVolume for a directory volume. Its size is
// its quota and it has no image: neither I/O limits (which throttle an
// image's loop device) nor a provisioning mode apply. The same nothing
// again is success (idempotent); anything else is refused, naming it,
// and nothing is changed.
func (p *Pool) Modify(ctx context.Context, id string, m volume.Modification) (volume.Volume, error) {
	v, err := p.Get(id)
	if err != nil {
		return volume.Volume{}, err
	}
	if m.QoS != (volume.QoS{}) {
		return volume.Volume{}, fmt.Errorf("%w: I/O limits apply to image volumes (their loop device); directory volume %s has none", ErrInvalidParameter, id)
	}
	if m.Provisioning != "" {
		return volume.Volume{}, fmt.Errorf("%w: provisioning %q applies to image volumes; directory volume %s is sized by its quota", ErrInvalidParameter, m.Provisioning, id)
	}
	return v, nil
}
