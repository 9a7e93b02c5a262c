package freeze

import (
	"os"
	"sync"
)

// answerAll answers the requests side by side: a group snapshot asks for
// many filesystems at once, and each FIFREEZE waits for its filesystem's
// journal to reach the disk; one after the other, a group of 8 spent
// most of its time there. It reports whether a volume was busy (try
// again). The caller holds a.mu.
func (a *Agent) answerAll(reqs []request) (busy bool) {
	held := make([]*holding, len(reqs))
	answered := make([]bool, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { held[i], answered[i] = a.answer(req) })
	}
	wg.Wait()
	for i, req := range reqs {
		if held[i] != nil {
			a.held[req.VolumeID] = held[i]
		}
		busy = busy || !answered[i]
	}
	return busy
}

// dropOrphanAnswers removes this node's answers that answer no request
// any more and hold nothing: a "not mounted" or "failed" answer written
// for a request read at the start of a sweep and withdrawn meanwhile (a
// group's requester withdraws those at once). A thaw-failed answer stays
// for its controller to read; a frozen one goes with its release.
func (a *Agent) dropOrphanAnswers(entries []os.DirEntry, asked map[string]request) {
	for _, de := range entries {
		id, ok := volumeOf(de.Name(), ackSuffix)
		if !ok {
			continue
		}
		if _, held := a.held[id]; held {
			continue
		}
		var ans answer
		if ok, _ := readJSON(ackPath(a.dir, id), &ans); !ok || ans.Node != a.node || ans.State == stateThawFailed || ans.State == stateFrozen {
			continue
		}
		if req, ok := asked[id]; ok && req.Token == ans.Token {
			continue
		}
		_ = os.Remove(ackPath(a.dir, id))
	}
}
