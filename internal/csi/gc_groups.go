package csi

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// groupLeftoverAge is how old the members of a group with no record must
// be before the sweep deletes them: a create cuts its members and commits
// its group within one call (seconds); a retry of that call deletes them
// itself.
const groupLeftoverAge = 10 * time.Minute

// gcGroupLeftovers deletes the members of groups never committed that no
// retry came for (pool.GroupLeftovers). Only where the controller shares
// this process's locks (--mode all on a node-local pool): a create of the
// same group, which reuses the members' IDs, holds their locks, so the
// sweep never deletes a member a retry has just cut again. Elsewhere the
// retried create is what removes them.
func (s *NodeService) gcGroupLeftovers(ctx context.Context, r *GCReport) {
	if !s.cfg.Controller || s.cfg.Shared {
		return
	}
	for _, id := range s.pool.GroupLeftovers(groupLeftoverAge) {
		if ctx.Err() != nil {
			return
		}
		s.withLock(id, func() {
			dropped, err := s.pool.DropGroupLeftover(ctx, id, groupLeftoverAge)
			if err != nil {
				klog.ErrorS(err, "delete a member of a group snapshot never committed", "snapshotID", id)
				return
			}
			if dropped {
				klog.InfoS("deleted a member of a group snapshot never committed", "snapshotID", id)
				r.GroupLeftovers = append(r.GroupLeftovers, id)
			}
		})
	}
}
