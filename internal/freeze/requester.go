package freeze

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Requester is the controller's side: it asks nodes to freeze.
type Requester struct {
	dir   string
	owner owner
	// AckTimeout bounds the wait for the node's answer, and for its thaw.
	AckTimeout time.Duration
	// Lease is how long a request holds the filesystem frozen unless it is
	// renewed; it is renewed every Lease/3 while the clone runs, so a node
	// thaws at most Lease after its controller died.
	Lease time.Duration
}

// Defaults of a Requester; a busy node (a mkfs holding the volume's lock)
// answers within the ack timeout or the CO retries.
const (
	DefaultAckTimeout = 10 * time.Second
	DefaultLease      = 30 * time.Second
)

// NewRequester returns the requester for the pool at poolDir.
func NewRequester(poolDir string) *Requester {
	return &Requester{dir: filepath.Join(poolDir, DirName), AckTimeout: DefaultAckTimeout, Lease: DefaultLease}
}

// CleanStale removes what controllers that are gone left in the pool:
// their requests, the answers to them, their owner files, and temporary
// files older than a minute (younger ones may be another process's write
// in flight). A controller calls it before it serves, so a freeze that a
// killed predecessor asked for is thawed by its node at once.
func (r *Requester) CleanStale() {
	removeStale(r.dir)
	removeDeadOwners(r.dir)
	removeOldTemp(r.dir, time.Minute)
}

// Close releases the requester's owner lock and removes its file: its
// requests are stale from now on. The Requester must not be used after.
func (r *Requester) Close() error { return r.owner.close(r.dir) }

// Hold has node freeze the filesystem of volumeID, runs fn while it is
// frozen and has it thawed; fn runs unfrozen when the node has no
// filesystem of the volume mounted (a crash-consistent copy, as of an
// unstaged volume). The caller holds the volume's lock.
func (r *Requester) Hold(ctx context.Context, volumeID, node string, fn func() error) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return fmt.Errorf("freeze requests: %w", err)
	}
	own, err := r.owner.get(r.dir)
	if err != nil {
		return err
	}
	req := request{Version: version, VolumeID: volumeID, Node: node, Token: newToken(), Deadline: time.Now().Add(r.Lease), Owner: own}
	if err := r.publish(req); err != nil {
		return err
	}
	ans, err := r.waitAnswer(ctx, req)
	if err != nil {
		r.withdraw(req)
		return err
	}
	if ans.State != stateFrozen {
		// The node holds nothing for an answer but "frozen": the request
		// and its answer are the controller's to remove.
		r.withdraw(req)
		r.dropAnswer(req)
	}
	switch ans.State {
	case stateFrozen:
	case stateNotMounted:
		return fn()
	case stateNoSpace:
		return fmt.Errorf("%w (node %s: %s)", ErrNoSpace, node, ans.Error)
	default:
		return fmt.Errorf("%w: node %s: %s", ErrFailed, node, ans.Error)
	}
	stop := r.renew(req)
	ferr := fn()
	stop()
	r.withdraw(req)
	return errors.Join(ferr, r.waitThaw(req, ans.MountPoint))
}

// publish links the request into place: EEXIST means another freeze of
// the volume runs, unless that request is stale (its controller died, or
// its lease ran out): a stale one is replaced, once.
func (r *Requester) publish(req request) error {
	path := reqPath(r.dir, req.VolumeID)
	for attempt := 0; ; attempt++ {
		err := writeJSON(r.dir, req.Owner, path, req, false)
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		var cur request
		ok, rerr := readJSON(path, &cur)
		if rerr != nil {
			return rerr
		}
		if ok && (!stale(r.dir, cur) || attempt > 0) {
			return fmt.Errorf("%w (volume %s, node %s, until %s)", ErrBusy, req.VolumeID, cur.Node, cur.Deadline.Format(time.RFC3339))
		}
		_ = os.Remove(path) // a dead controller's request (or gone meanwhile)
		removeDeadOwners(r.dir)
	}
}

// waitAnswer polls for the node's answer to req: 100 µs at first, as an
// inotify-woken node answers within a millisecond, up to 10 ms apart.
func (r *Requester) waitAnswer(ctx context.Context, req request) (answer, error) {
	var ans answer
	err := r.poll(ctx, func() (bool, error) {
		ok, err := readJSON(ackPath(r.dir, req.VolumeID), &ans)
		return ok && ans.Token == req.Token, err
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return ans, fmt.Errorf("%w within %s: is filevol running on node %s? (volume %s)", ErrNodeUnavailable, r.AckTimeout, req.Node, req.VolumeID)
	}
	return ans, err
}

// waitThaw waits for the node to drop its answer, which it does once the
// filesystem is thawed, or to say the thaw failed.
func (r *Requester) waitThaw(req request, mountPoint string) error {
	var ans answer
	err := r.poll(context.Background(), func() (bool, error) {
		ok, err := readJSON(ackPath(r.dir, req.VolumeID), &ans)
		return !ok || ans.Token != req.Token || ans.State == stateThawFailed, err
	})
	switch {
	case err != nil:
		return fmt.Errorf("%w: node %s did not confirm the thaw of volume %s at %s: %v", ErrNodeUnavailable, req.Node, req.VolumeID, mountPoint, err)
	case ans.Token == req.Token && ans.State == stateThawFailed:
		return fmt.Errorf("%w: FILESYSTEM LEFT FROZEN: node %s could not thaw volume %s at %s (run fsfreeze -u %s there): %s",
			ErrFailed, req.Node, req.VolumeID, mountPoint, mountPoint, ans.Error)
	}
	return nil
}

func (r *Requester) poll(ctx context.Context, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, r.AckTimeout)
	defer cancel()
	wait := 100 * time.Microsecond
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 10*time.Millisecond)
	}
}

// renew pushes the request's deadline forward while the clone runs.
func (r *Requester) renew(req request) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(r.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				req.Deadline = time.Now().Add(r.Lease)
				_ = writeJSON(r.dir, req.Owner, reqPath(r.dir, req.VolumeID), req, true)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// dropAnswer removes the node's answer to req, if it is still that.
func (r *Requester) dropAnswer(req request) {
	var ans answer
	if ok, _ := readJSON(ackPath(r.dir, req.VolumeID), &ans); ok && ans.Token == req.Token {
		_ = os.Remove(ackPath(r.dir, req.VolumeID))
	}
}

// withdraw removes the request if it is still ours.
func (r *Requester) withdraw(req request) {
	var cur request
	if ok, _ := readJSON(reqPath(r.dir, req.VolumeID), &cur); ok && cur.Token == req.Token {
		_ = os.Remove(reqPath(r.dir, req.VolumeID))
	}
}
