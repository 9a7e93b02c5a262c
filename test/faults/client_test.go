package faults

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/loop"
)

const (
	// callTimeout is what one attempt may take, like kubelet's and the
	// sidecars' per-call timeouts (2 min in kubelet; shorter here, the
	// volumes are small).
	callTimeout = 60 * time.Second
	// stepTimeout bounds the retries of one step: a step that a restarted
	// driver never completes is a finding, not something to wait out.
	stepTimeout = 3 * time.Minute
)

// retryable are the codes on which the sidecars and kubelet retry the same
// call and on which this test therefore retries: the driver was gone
// (UNAVAILABLE), busy with the volume (ABORTED), or too slow
// (DEADLINE_EXCEEDED). Any other error ends the step: after a crash the
// retried call must complete, not fail.
func retryable(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.Aborted || c == codes.DeadlineExceeded
}

// heldElsewhere: the driver unmounted the device but cannot detach it
// because another process's mount namespace still holds a copy of the
// mount (the driver's error says so: loop.ForeignMount). On a shared test
// machine that is another test's GlusterFS server or Kubernetes node
// dropping the host's mounts it copied, mount by mount: tens of seconds
// with a thousand mounts, past the driver's own busy retries, and nothing
// the driver did wrong. kubelet retries a failed NodeUnstageVolume until
// it succeeds; so does the harness, within the step's timeout, counted in
// the report's retries. So is a device mounted in no namespace any more
// but still claimed: the holder let go, and the filesystem's last unmount
// (a btrfs one writes back for seconds under load) runs only then; the
// driver's error names the last state it saw. A mount left in the
// driver's own namespace is not retried: that is a finding, and so is a
// claim that outlasts the step's timeout.
func heldElsewhere(c codes.Code, err error) bool {
	msg := err.Error()
	return c == codes.FailedPrecondition && strings.Contains(msg, loop.ErrBusy.Error()) &&
		!strings.Contains(msg, loop.MountedHere)
}

// foreignWait spaces the retries of a call held up by another process's
// mount namespace: such a hold lasts seconds, not milliseconds.
const foreignWait = 500 * time.Millisecond

// stats counts what happened, for the report. Safe for concurrent use.
type stats struct {
	mu       sync.Mutex
	calls    map[string]int // by RPC
	retries  map[string]int // by RPC and code
	inflight map[string]int // RPCs in progress now, by name
	// killPoints counts kills by the point they hit; points is every
	// boundary the watcher saw (hit or not).
	killPoints map[string]int
	points     map[string]int
	kills      int
	restarts   int
	volumes    int
	// offlineResizes counts NodeExpandVolume calls answered
	// FAILED_PRECONDITION (online resize impossible) and completed by
	// re-staging, as the driver's message asks.
	offlineResizes int
	// frozen counts filesystems found frozen after CreateSnapshot.
	frozen   int
	verified int
	bytes    int64
	// corruptions counts verifications that read other data than was
	// acknowledged; failures lists every step that did not complete.
	corruptions int
	failures    []string
}

func newStats() *stats {
	return &stats{calls: map[string]int{}, retries: map[string]int{}, inflight: map[string]int{},
		killPoints: map[string]int{}, points: map[string]int{}}
}

func (s *stats) add(f func(s *stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// inflightNames describes the RPCs in progress, for naming a random kill.
func (s *stats) inflightNames() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n, c := range s.inflight {
		if c > 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "idle"
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

// fail records a finding (a bug in the driver, unless the test is wrong).
func (s *stats) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.add(func(s *stats) { s.failures = append(s.failures, msg) })
}

// call runs one CSI call until it succeeds, retrying like a sidecar:
// each attempt with its own deadline, retryable codes after a short
// jittered backoff, everything else returned. ok lists further codes that
// count as success for this step (NOT_FOUND for a retried delete, say).
// It gives up at once when the driver is down for good (proc.down: it
// died and nothing will restart it), saying how it died; a step that times
// out returns the driver's kernel stacks and goroutine dump.
func (o *ops) call(op, what string, fn func(ctx context.Context) error, ok ...codes.Code) error {
	s := o.st
	attemptTimeout, step := o.attemptTimeout, o.stepTimeout
	if attemptTimeout == 0 {
		attemptTimeout = callTimeout
	}
	if step == 0 {
		step = stepTimeout
	}
	deadline := time.Now().Add(step)
	delay := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		s.add(func(s *stats) { s.calls[op]++; s.inflight[op]++ })
		ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		err := fn(ctx)
		cancel()
		s.add(func(s *stats) { s.inflight[op]-- })
		c := status.Code(err)
		if err == nil || slices.Contains(ok, c) {
			return nil
		}
		foreign := heldElsewhere(c, err)
		if !retryable(c) && !foreign {
			return fmt.Errorf("%s %s: attempt %d: %w", op, what, attempt, err)
		}
		if down := o.p.down(); down != nil {
			return fmt.Errorf("%s %s: attempt %d: %w: %w", op, what, attempt, err, down)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s: attempt %d: no success in %s: %w\n%s", op, what, attempt, step, err,
				o.p.diagnose(fmt.Sprintf("%s %s: no success in %s", op, what, step)))
		}
		if foreign {
			s.add(func(s *stats) { s.retries[op+" "+c.String()+" (device busy, not mounted in the driver's namespace)"]++ })
			time.Sleep(foreignWait)
			continue
		}
		s.add(func(s *stats) { s.retries[op+" "+c.String()]++ })
		time.Sleep(delay/2 + rand.N(delay))
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// sortedCounts renders a count map, largest first.
func sortedCounts(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n    %5d  %s", m[k], k)
	}
	return b.String()
}
