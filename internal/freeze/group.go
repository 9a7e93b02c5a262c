package freeze

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// Target is one filesystem to hold frozen: a volume, and the node that
// has it mounted.
type Target struct {
	VolumeID, Node string
}

// HoldAll is Hold for a group: it publishes the freeze requests of every
// target before it waits for any answer, so a node's agent, woken once,
// freezes them all in one sweep; it runs fn once every filesystem is
// frozen (or has nothing mounted to freeze), then has them all thawed.
// Every filesystem is frozen before any clone starts and none is thawed
// before the last clone ends, which is what makes the clones consistent
// with one another: as if the node had lost power at one instant.
//
// If a target cannot be frozen (busy, node silent, freeze failed), fn
// does not run, the targets already frozen are thawed, and the error
// says which. Targets must name distinct volumes. A requester killed at
// any point leaves only requests whose owner lock is free, which each
// node thaws on its next sweep (agent.go).
func (r *Requester) HoldAll(ctx context.Context, targets []Target, fn func() error) error {
	if len(targets) == 0 {
		return fn()
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return fmt.Errorf("freeze requests: %w", err)
	}
	own, err := r.owner.get(r.dir)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.Lease)
	reqs := make([]request, 0, len(targets))
	// A target that cannot be asked (busy: another freeze holds it) stops
	// the asking, but the requests already published still go through the
	// wait and release below: their node may have frozen them already, and
	// only the answer says so. Withdrawing them unanswered would return
	// while a filesystem is still frozen, until the node's next sweep.
	var pubErr error
	for _, t := range targets {
		req := request{Version: version, VolumeID: t.VolumeID, Node: t.Node, Token: newToken(), Deadline: deadline, Owner: own}
		if pubErr = r.publish(req); pubErr != nil {
			break
		}
		reqs = append(reqs, req)
	}
	answers, err := r.waitAnswers(ctx, reqs)
	err = errors.Join(pubErr, err)
	var frozen, others []request
	var mps []string
	var errs []error
	for i, req := range reqs {
		ans, ok := answers[i]
		switch {
		case !ok:
			// No answer (err says why); withdrawn below, and thawed by its
			// node should it answer late.
		case ans.State == stateFrozen:
			frozen = append(frozen, req)
			mps = append(mps, ans.MountPoint)
			continue
		case ans.State == stateNotMounted:
		case ans.State == stateNoSpace:
			errs = append(errs, fmt.Errorf("%w (node %s, volume %s: %s)", ErrNoSpace, req.Node, req.VolumeID, ans.Error))
		default:
			errs = append(errs, fmt.Errorf("%w: node %s, volume %s: %s", ErrFailed, req.Node, req.VolumeID, ans.Error))
		}
		// The node holds nothing for an answer but "frozen".
		r.withdraw(req)
		r.dropAnswer(req)
		if ok {
			others = append(others, req)
		}
	}
	// A sweep that read one of those requests before it was withdrawn may
	// answer it again; the node drops such an answer on its next sweep
	// (dropOrphanAnswers). Wait for that, so nothing is left behind.
	defer r.releaseAll(others, make([]string, len(others)))
	if err != nil || len(errs) > 0 {
		errs = append([]error{err}, errs...)
		return errors.Join(append(errs, r.releaseAll(frozen, mps))...)
	}
	stops := make([]func(), 0, len(frozen))
	for _, req := range frozen {
		stops = append(stops, r.renew(req))
	}
	ferr := fn()
	for _, stop := range stops {
		stop()
	}
	return errors.Join(ferr, r.releaseAll(frozen, mps))
}

// waitAnswers polls for the answers to every request at once; answers
// holds those that came, by index. The error names the requests still
// unanswered when the ack timeout ran out.
func (r *Requester) waitAnswers(ctx context.Context, reqs []request) (map[int]answer, error) {
	answers := map[int]answer{}
	err := r.poll(ctx, func() (bool, error) {
		for i, req := range reqs {
			if _, ok := answers[i]; ok {
				continue
			}
			var ans answer
			ok, err := readJSON(ackPath(r.dir, req.VolumeID), &ans)
			if err != nil {
				return false, err
			}
			if ok && ans.Token == req.Token {
				answers[i] = ans
			}
		}
		return len(answers) == len(reqs), nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		var missing []string
		for i, req := range reqs {
			if _, ok := answers[i]; !ok {
				missing = append(missing, fmt.Sprintf("volume %s on node %s", req.VolumeID, req.Node))
			}
		}
		return answers, fmt.Errorf("%w within %s: is filevol running there? (%v)", ErrNodeUnavailable, r.AckTimeout, missing)
	}
	return answers, err
}

// releaseAll withdraws every request, then waits for the thaw of those
// that were frozen (mountPoints[i] is where reqs[i] is; nil when none
// was): withdrawn together, they are thawed in one sweep of their node.
func (r *Requester) releaseAll(reqs []request, mountPoints []string) error {
	for _, req := range reqs {
		r.withdraw(req)
	}
	if mountPoints == nil {
		return nil
	}
	var errs []error
	for i, req := range reqs {
		errs = append(errs, r.waitThaw(req, mountPoints[i]))
	}
	return errors.Join(errs...)
}
