package csi

import "sync"

// inflight is a set of keys (volume IDs, names) with a call in progress.
// A second call on a busy key is answered ABORTED at once, as the CSI spec
// asks ("operation pending for volume"), instead of queueing behind the
// first: there is no lock shared by unrelated volumes.
type inflight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func newInflight() *inflight { return &inflight{keys: map[string]struct{}{}} }

// tryLock takes every key or none. It returns the release function, or
// an ABORTED error naming the busy key.
func (f *inflight) tryLock(keys ...string) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if _, busy := f.keys[k]; busy {
			return nil, aborted("an operation on %q is already in progress; retry later", k)
		}
	}
	for _, k := range keys {
		f.keys[k] = struct{}{}
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, k := range keys {
			delete(f.keys, k)
		}
	}, nil
}
