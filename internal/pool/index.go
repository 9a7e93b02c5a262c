package pool

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// index caches the records in memory so List and the provisioned total
// need no disk access (ListVolumes and GetCapacity are polled by the
// sidecars). It is only a cache: Get re-reads the record and refreshes it.
type index struct {
	mu   sync.RWMutex
	vols map[string]Volume
	// provisioned is the sum of vols' CapacityBytes, kept up to date so
	// Capacity is O(1).
	provisioned int64
	// sorted is vols ordered by ID, rebuilt by the first list after a
	// change (nil: stale). Lists between changes share it.
	sorted []Volume
}

func newIndex() *index { return &index{vols: make(map[string]Volume)} }

// put adds or replaces v. Putting what is already there (every Get of an
// unchanged record) keeps the sorted cache.
func (x *index) put(v Volume) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.vols[v.ID]; ok {
		if sameVolume(old, v) {
			return
		}
		x.provisioned -= old.CapacityBytes
	}
	x.vols[v.ID] = v
	x.provisioned += v.CapacityBytes
	x.sorted = nil
}

// remove forgets id; unknown IDs are ignored.
func (x *index) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, ok := x.vols[id]
	if !ok {
		return
	}
	x.provisioned -= old.CapacityBytes
	delete(x.vols, id)
	x.sorted = nil
}

// get returns the indexed volume id (its Parameters map shared: read only).
func (x *index) get(id string) (Volume, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	v, ok := x.vols[id]
	return v, ok
}

func (x *index) has(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.vols[id]
	return ok
}

func (x *index) provisionedBytes() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.provisioned
}

// list returns every volume sorted by ID. The caller owns the result:
// Parameters maps are copied, so modifying them cannot race with, or
// corrupt, the index.
func (x *index) list() []Volume {
	x.mu.RLock()
	sorted := x.sorted
	x.mu.RUnlock()
	if sorted == nil {
		sorted = x.rebuild()
	}
	out := make([]Volume, len(sorted))
	for i, v := range sorted {
		v.Parameters = maps.Clone(v.Parameters)
		out[i] = v
	}
	return out
}

// rebuild sorts vols into x.sorted unless another list already did.
func (x *index) rebuild() []Volume {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sorted == nil {
		s := make([]Volume, 0, len(x.vols))
		for _, v := range x.vols {
			s = append(s, v)
		}
		slices.SortFunc(s, func(a, b Volume) int { return strings.Compare(a.ID, b.ID) })
		x.sorted = s
	}
	return x.sorted
}

// sameVolume compares every field of the record: one left out (as
// ImagePending once was) keeps a stale copy in the index.
func sameVolume(a, b Volume) bool {
	return a.Version == b.Version && a.ID == b.ID && a.Name == b.Name && a.ImagePending == b.ImagePending &&
		a.CapacityBytes == b.CapacityBytes && a.FSType == b.FSType &&
		a.Provisioning == b.Provisioning && a.Node == b.Node &&
		a.CreatedAt.Equal(b.CreatedAt) && maps.Equal(a.Parameters, b.Parameters) &&
		sameSource(a.ContentSource, b.ContentSource)
}
