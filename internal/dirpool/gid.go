package dirpool

import (
	"errors"
	"fmt"

	"github.com/filevol/filevol/internal/volume"
)

// reserveGID picks the volume's gid: the gid parameter when given (not
// allocated, not checked: the class asked for it), else the lowest gid of
// the range that no live volume of the pool and no create in flight
// holds. The live volumes are the durable records, read at open and kept
// by every create and delete, so the allocation survives restarts and a
// changed range is honoured at the next create. Allocated gids of every
// range are avoided, and explicit ones too: two volumes of the pool never
// share a gid the pool handed out. The index is brought up to date with
// the records on disk first: another process (a controller replica that
// led before this one, on a shared pool) may have created or deleted
// volumes since this one loaded it.
func (p *Pool) reserveGID(params Params) (uint32, bool, error) {
	if params.HasGID {
		return params.GID, false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refreshIndex(); err != nil {
		return 0, false, err
	}
	used := map[uint32]bool{}
	p.vols.Each(func(v Volume) { used[v.GID] = true })
	for g := range p.reserved {
		used[g] = true
	}
	gid, ok := lowestFree(params.GIDRangeStart, params.GIDRangeEnd, used)
	if !ok {
		return 0, false, fmt.Errorf("%w: every gid of %s..%s (%d..%d) is held by a volume of the pool; delete volumes or widen the range",
			ErrGIDRangeExhausted, ParamGIDRangeStart, ParamGIDRangeEnd, params.GIDRangeStart, params.GIDRangeEnd)
	}
	p.reserved[gid] = true
	return gid, true, nil
}

// releaseReservation ends a create's hold on its gid: the record (if the
// create committed one) holds it from now on.
func (p *Pool) releaseReservation(gid uint32, allocated bool) {
	if !allocated {
		return
	}
	p.mu.Lock()
	delete(p.reserved, gid)
	p.mu.Unlock()
}

// lowestFree is the lowest of start..end (inclusive) not in used.
func lowestFree(start, end uint32, used map[uint32]bool) (uint32, bool) {
	for g := uint64(start); g <= uint64(end); g++ {
		if !used[uint32(g)] {
			return uint32(g), true
		}
	}
	return 0, false
}

// refreshIndex reads the records that appeared on disk since the index
// was loaded and drops those that went (Get does both).
func (p *Pool) refreshIndex() error {
	sc, err := p.vols.Scan()
	if err != nil {
		return err
	}
	for id := range sc.Records {
		if !p.vols.Has(id) {
			if _, err := p.vols.Get(id); err != nil && !errors.Is(err, volume.ErrNotFound) {
				return err
			}
		}
	}
	for _, v := range p.vols.List() {
		if !sc.Records[v.ID] {
			_, _ = p.vols.Get(v.ID) // gone: Get drops it from the index
		}
	}
	return nil
}
