package freeze

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Marks are the node's durable freeze marks: one per filesystem it froze
// and has not thawed yet, so that a node killed while a filesystem is
// frozen thaws it when it starts again. They must be this node's alone:
// ThawLeftovers drops every mark whose filesystem is not mounted here, so
// on a pool that several nodes share, marks kept for all of them would
// lose another node's, and that node, killed, would never thaw what it
// froze (internal/nodestate keeps them per node there).
type Marks interface {
	Mark(volumeID string) error
	Unmark(volumeID string) error
	List() ([]string, error)
}

// Agent is the node's side: it answers the requests that name its node.
type Agent struct {
	dir  string
	node string
	// MountPoint returns a mount point of the volume's filesystem on this
	// node, "" when none: FIFREEZE acts on the filesystem, any mount of
	// its root will do.
	MountPoint func(volumeID string) (string, error)
	// Freeze and Thaw are FIFREEZE and FITHAW on a mount point.
	Freeze, Thaw func(mountPoint string) error
	// TryLock takes the volume's node lock, or fails at once when a node
	// call holds it; the agent then tries again shortly.
	TryLock func(volumeID string) (unlock func(), err error)
	// PoolFull tells whether the pool is out of space (a freeze that fails
	// with EIO then says so). Optional.
	PoolFull func() bool
	Marks    Marks
	// Poll is how often the directory is read even without an inotify
	// event: a shared filesystem reports other hosts' changes to nobody.
	Poll time.Duration

	mu   sync.Mutex
	held map[string]*holding
	// owner is the agent's own lock, which names its temporary files.
	owner     owner
	ownerName string
}

type holding struct {
	token    string
	mp       string
	deadline time.Time
	unlock   func()
	// ours: we froze it. A filesystem someone else froze (FIFREEZE says
	// EBUSY and no mark of ours names it) is cloned and left frozen, as
	// its freezer expects.
	ours bool
}

// thawAttempts bounds the retries of a failed FITHAW: a filesystem left
// frozen blocks every writer of the pod until someone thaws it.
const thawAttempts = 5

// NewAgent returns the agent of node for the pool at poolDir; set the
// function fields before Run.
func NewAgent(poolDir, node string) *Agent {
	return &Agent{dir: filepath.Join(poolDir, DirName), node: node, Poll: 200 * time.Millisecond, held: map[string]*holding{}}
}

// ThawLeftovers thaws what the marks name: filesystems this node froze
// before it was killed. Run calls it first; callers that serve before Run
// starts may call it earlier. Of the request directory's files it removes
// only its own node's answers, and the owner and temporary files of
// processes whose owner lock is free (owner.go): a live process anywhere
// holds its lock, on every filesystem the protocol runs on.
func (a *Agent) ThawLeftovers() {
	ids, err := a.Marks.List()
	if err != nil {
		klog.ErrorS(err, "read freeze marks; filesystems a killed driver froze may still be frozen")
		return
	}
	for _, id := range ids {
		mp, err := a.MountPoint(id)
		switch {
		case err != nil:
			klog.ErrorS(err, "look up a filesystem left frozen", "volumeID", id)
		case mp == "":
			klog.InfoS("freeze mark of a filesystem no longer mounted; dropped", "volumeID", id)
			_ = a.Marks.Unmark(id)
		default:
			if err := a.thawFS(id, mp); err == nil {
				klog.InfoS("thawed a filesystem a killed driver had frozen for a snapshot or clone", "volumeID", id, "mountPoint", mp)
			}
		}
	}
	removeDeadOwners(a.dir)
	removeOldTemp(a.dir, time.Minute)
	// Answers this node gave before it died describe nothing now.
	entries, _ := os.ReadDir(a.dir)
	for _, de := range entries {
		if id, ok := volumeOf(de.Name(), ackSuffix); ok {
			var ans answer
			if ok, _ := readJSON(ackPath(a.dir, id), &ans); ok && ans.Node == a.node {
				_ = os.Remove(ackPath(a.dir, id))
			}
		}
	}
}

// Run answers requests until ctx is done, then thaws what it holds.
func (a *Agent) Run(ctx context.Context) {
	a.ThawLeftovers()
	var err error
	if a.ownerName, err = a.owner.get(a.dir); err != nil {
		klog.ErrorS(err, "freeze requests cannot be answered on this node")
	}
	defer a.owner.close(a.dir)
	wake := a.watch(ctx)
	for {
		next := a.sweep()
		timer := time.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			a.releaseAll()
			return
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// sweep answers new requests and thaws what is no longer asked for. It
// returns how long the loop may sleep without an event.
func (a *Agent) sweep() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	next := a.Poll
	asked := map[string]request{}
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		klog.ErrorS(err, "read freeze requests")
		return next
	}
	for _, de := range entries {
		id, ok := volumeOf(de.Name(), reqSuffix)
		if !ok {
			continue
		}
		var req request
		if ok, err := readJSON(reqPath(a.dir, id), &req); !ok || err != nil || req.Node != a.node {
			continue
		}
		if stale(a.dir, req) {
			// Its controller is gone: nothing is frozen for it, and what
			// was is thawed below. The agent never removes a request (a
			// controller may be replacing it at that instant); the next
			// controller does (removeStale).
			continue
		}
		asked[id] = req
	}
	for id, h := range a.held {
		req, ok := asked[id]
		switch {
		case !ok || req.Token != h.token:
			a.release(id, h)
		default:
			h.deadline = req.Deadline
			next = min(next, time.Until(req.Deadline))
		}
	}
	var todo []request
	for id, req := range asked {
		if _, ok := a.held[id]; ok || a.answered(req) {
			continue
		}
		todo = append(todo, req)
	}
	if a.answerAll(todo) {
		next = min(next, 5*time.Millisecond) // a volume is busy: again soon
	}
	a.dropOrphanAnswers(entries, asked)
	return max(next, time.Millisecond)
}

func (a *Agent) answered(req request) bool {
	var ans answer
	ok, _ := readJSON(ackPath(a.dir, req.VolumeID), &ans)
	return ok && ans.Token == req.Token
}

// answer freezes for req and writes the answer; false when the volume's
// lock is busy (try again). It returns what it holds frozen, if anything,
// for the caller to keep in a.held.
func (a *Agent) answer(req request) (*holding, bool) {
	id := req.VolumeID
	unlock, err := a.TryLock(id)
	if err != nil {
		return nil, false
	}
	reply := func(state, mp string, err error) error {
		ans := answer{Token: req.Token, Node: a.node, State: state, MountPoint: mp}
		if err != nil {
			ans.Error = err.Error()
		}
		werr := writeJSON(a.dir, a.ownerName, ackPath(a.dir, id), ans, true)
		if werr != nil {
			klog.ErrorS(werr, "answer a freeze request", "volumeID", id)
		}
		return werr
	}
	mp, err := a.MountPoint(id)
	if err != nil || mp == "" {
		unlock()
		if err != nil {
			reply(stateFailed, "", fmt.Errorf("look up the mounts of volume %s: %w", id, err))
		} else {
			reply(stateNotMounted, "", nil)
		}
		return nil, true
	}
	marks, err := a.Marks.List()
	if err == nil {
		err = a.Marks.Mark(id)
	}
	if err != nil {
		unlock()
		reply(stateFailed, mp, fmt.Errorf("mark volume %s as frozen: %w", id, err))
		return nil, true
	}
	h := &holding{token: req.Token, mp: mp, deadline: req.Deadline, unlock: unlock, ours: true}
	if err := a.Freeze(mp); err != nil {
		if errors.Is(err, unix.EBUSY) && !slices.Contains(marks, id) {
			klog.InfoS("filesystem already frozen by someone else; cloning it as it is and leaving it frozen", "volumeID", id, "mountPoint", mp)
			_ = a.Marks.Unmark(id)
			h.ours = false
		} else if !errors.Is(err, unix.EBUSY) {
			_ = a.Marks.Unmark(id)
			unlock()
			if errors.Is(err, unix.EIO) && a.PoolFull != nil && a.PoolFull() {
				// Freezing flushes the journal; on a thin volume whose pool
				// is full that write fails, and the kernel says EIO.
				reply(stateNoSpace, mp, err)
			} else {
				reply(stateFailed, mp, fmt.Errorf("freeze the filesystem of volume %s at %s: %w", id, mp, err))
			}
			return nil, true
		}
	}
	if err := reply(stateFrozen, mp, nil); err != nil {
		// Nobody would learn it is frozen, nor ask for the thaw.
		a.releaseUnheld(id, h)
		return nil, true
	}
	klog.V(4).InfoS("filesystem frozen", "volumeID", id, "mountPoint", mp)
	return h, true
}

// release thaws what h holds, drops the lock and then the answer: a
// controller that sees the answer gone finds the volume free on the node.
func (a *Agent) release(id string, h *holding) {
	delete(a.held, id)
	a.releaseUnheld(id, h)
}

// releaseUnheld is release of a holding not (or no longer) in a.held.
func (a *Agent) releaseUnheld(id string, h *holding) {
	if h.ours {
		if err := a.thawFS(id, h.mp); err != nil {
			h.unlock()
			ans := answer{Token: h.token, Node: a.node, State: stateThawFailed, MountPoint: h.mp, Error: err.Error()}
			_ = writeJSON(a.dir, a.ownerName, ackPath(a.dir, id), ans, true)
			return
		}
	}
	h.unlock()
	var ans answer
	if ok, _ := readJSON(ackPath(a.dir, id), &ans); ok && ans.Token == h.token {
		_ = os.Remove(ackPath(a.dir, id))
	}
	klog.V(4).InfoS("filesystem thawed", "volumeID", id, "mountPoint", h.mp)
}

// thawFS thaws, retrying, and drops the mark once thawed: a mark is kept
// while the filesystem may still be frozen.
func (a *Agent) thawFS(id, mp string) error {
	var err error
	for i := range thawAttempts {
		if err = a.Thaw(mp); err == nil || errors.Is(err, unix.EINVAL) {
			// EINVAL: not frozen (any more); nothing is left to thaw.
			return a.Marks.Unmark(id)
		}
		time.Sleep(time.Duration(i+1) * 10 * time.Millisecond)
	}
	klog.ErrorS(err, "FILESYSTEM LEFT FROZEN: thaw it by hand (fsfreeze -u)", "volumeID", id, "mountPoint", mp)
	return fmt.Errorf("thaw the filesystem of volume %s at %s (run fsfreeze -u %s): %w", id, mp, mp, err)
}

func (a *Agent) releaseAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, h := range a.held {
		a.release(id, h)
	}
}
