package recordstore

import (
	"reflect"
	"slices"
	"strings"
	"sync"
)

// sameRecord reports whether two records are the same. Every field, by
// reflection, not a list of them: a field added to a record type can never
// be forgotten here (a hand-written compare once missed one and kept a
// stale copy in the index). A false "different" only costs a rebuild of
// the sorted cache.
func sameRecord[T Record](a, b T) bool { return reflect.DeepEqual(a, b) }

// listSorted sorts records by ID.
func listSorted[T Record](recs []T) {
	slices.SortFunc(recs, func(a, b T) int { return strings.Compare(a.RecordID(), b.RecordID()) })
}

// index caches the records in memory so List and Total need no disk access
// (ListVolumes and GetCapacity are polled by the sidecars). It is only a
// cache: Get re-reads the record and refreshes it.
type index[T Record] struct {
	mu     sync.RWMutex
	recs   map[string]T
	weight func(T) int64
	// total is the sum of weight over recs.
	total int64
	// sorted is recs ordered by ID, rebuilt by the first list after a
	// change (nil: stale). Lists between changes share it.
	sorted []T
}

func (x *index[T]) weigh(rec T) int64 {
	if x.weight == nil {
		return 0
	}
	return x.weight(rec)
}

// put adds or replaces rec. Putting what is already there (every Get of
// an unchanged record) keeps the sorted cache.
func (x *index[T]) put(rec T) {
	x.mu.Lock()
	defer x.mu.Unlock()
	id := rec.RecordID()
	if old, ok := x.recs[id]; ok {
		if sameRecord(old, rec) {
			return
		}
		x.total -= x.weigh(old)
	}
	x.recs[id] = rec
	x.total += x.weigh(rec)
	x.sorted = nil
}

// remove forgets id; unknown IDs are ignored.
func (x *index[T]) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, ok := x.recs[id]
	if !ok {
		return
	}
	x.total -= x.weigh(old)
	delete(x.recs, id)
	x.sorted = nil
}

func (x *index[T]) get(id string) (T, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	rec, ok := x.recs[id]
	return rec, ok
}

func (x *index[T]) totalWeight() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.total
}

func (x *index[T]) each(fn func(T)) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, rec := range x.recs {
		fn(rec)
	}
}

// list returns a copy of the records sorted by ID.
func (x *index[T]) list() []T {
	x.mu.RLock()
	sorted := x.sorted
	x.mu.RUnlock()
	if sorted == nil {
		sorted = x.rebuild()
	}
	return slices.Clone(sorted)
}

// rebuild sorts recs into x.sorted unless another list already did.
func (x *index[T]) rebuild() []T {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sorted == nil {
		s := make([]T, 0, len(x.recs))
		for _, rec := range x.recs {
			s = append(s, rec)
		}
		listSorted(s)
		x.sorted = s
	}
	return x.sorted
}
