package freeze

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kernel is a fake of what the agent asks of a node: mounts, FIFREEZE and
// FITHAW, the node's per-volume locks and its durable marks.
type kernel struct {
	mu      sync.Mutex
	mounts  map[string]string // volume ID → mount point
	frozen  map[string]bool   // mount point → frozen
	locked  map[string]bool
	marks   []string
	freezes int
	failEIO bool
}

func newKernel() *kernel {
	return &kernel{mounts: map[string]string{}, frozen: map[string]bool{}, locked: map[string]bool{}}
}

func (k *kernel) isFrozen(mp string) bool { k.mu.Lock(); defer k.mu.Unlock(); return k.frozen[mp] }
func (k *kernel) isLocked(id string) bool { k.mu.Lock(); defer k.mu.Unlock(); return k.locked[id] }
func (k *kernel) markCount() int          { k.mu.Lock(); defer k.mu.Unlock(); return len(k.marks) }

func (k *kernel) Mark(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !slices.Contains(k.marks, id) {
		k.marks = append(k.marks, id)
	}
	return nil
}
func (k *kernel) Unmark(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.marks = slices.DeleteFunc(k.marks, func(x string) bool { return x == id })
	return nil
}
func (k *kernel) List() ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.marks), nil
}

func (k *kernel) agent(t *testing.T, dir, node string) *Agent {
	a := NewAgent(dir, node)
	a.Poll = 20 * time.Millisecond
	a.Marks = k
	a.MountPoint = func(id string) (string, error) { k.mu.Lock(); defer k.mu.Unlock(); return k.mounts[id], nil }
	a.Freeze = func(mp string) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		switch {
		case k.failEIO:
			return unix.EIO
		case k.frozen[mp]:
			return unix.EBUSY
		}
		k.frozen[mp] = true
		k.freezes++
		return nil
	}
	a.Thaw = func(mp string) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		if !k.frozen[mp] {
			return unix.EINVAL
		}
		k.frozen[mp] = false
		return nil
	}
	a.TryLock = func(id string) (func(), error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.locked[id] {
			return nil, errors.New("busy")
		}
		k.locked[id] = true
		return func() { k.mu.Lock(); delete(k.locked, id); k.mu.Unlock() }, nil
	}
	a.PoolFull = func() bool { return true }
	return a
}

func start(t *testing.T, a *Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func requester(t *testing.T, dir string) *Requester {
	r := NewRequester(dir)
	r.AckTimeout = 2 * time.Second
	return r
}

const vol = "fv1-img-3f9a0c2e-00000000000000000000000000000001"

// The controller and two nodes share nothing but the directory: only the
// node the request names freezes, the clone runs frozen, and the
// filesystem is thawed and the directory empty when Hold returns.
func TestHoldFreezesOnTheNamedNodeOnly(t *testing.T) {
	dir := t.TempDir()
	ka, kb := newKernel(), newKernel()
	ka.mounts[vol], kb.mounts[vol] = "/a/staging", "/b/staging"
	start(t, ka.agent(t, dir, "node-a"))
	start(t, kb.agent(t, dir, "node-b"))
	r := requester(t, dir)
	ran := false
	err := r.Hold(context.Background(), vol, "node-b", func() error {
		ran = true
		if !kb.isFrozen("/b/staging") || ka.isFrozen("/a/staging") {
			return fmt.Errorf("during the clone: b frozen %v, a frozen %v; want only b", kb.isFrozen("/b/staging"), ka.isFrozen("/a/staging"))
		}
		if !kb.isLocked(vol) {
			return errors.New("node b does not hold the volume's lock while frozen: an unstage could unmount a frozen filesystem")
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Hold = %v (clone ran: %v)", err, ran)
	}
	if kb.isFrozen("/b/staging") || kb.markCount() != 0 {
		t.Errorf("after Hold: frozen %v, marks %d", kb.isFrozen("/b/staging"), kb.markCount())
	}
	if kb.isLocked(vol) {
		t.Error("node b still holds the volume's lock")
	}
	assertEmpty(t, dir)
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir + "/" + DirName)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ownerPrefix) {
			continue // the requester's own lock, held while it lives
		}
		t.Errorf("left in the freeze directory: %s", e.Name())
	}
}

func TestNotMountedRunsUnfrozen(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	start(t, k.agent(t, dir, "n"))
	ran := false
	if err := requester(t, dir).Hold(context.Background(), vol, "n", func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Hold = %v, ran %v", err, ran)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.freezes != 0 {
		t.Error("froze a volume that is not mounted")
	}
	assertEmpty(t, dir)
}

func TestNodeNotRunningIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	r := requester(t, dir)
	r.AckTimeout = 50 * time.Millisecond
	err := r.Hold(context.Background(), vol, "gone", func() error { t.Error("clone ran without an answer"); return nil })
	if !errors.Is(err, ErrNodeUnavailable) {
		t.Fatalf("Hold = %v, want ErrNodeUnavailable", err)
	}
	assertEmpty(t, dir)
}

func TestSecondFreezeOfAVolumeIsBusy(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	k.mounts[vol] = "/s"
	start(t, k.agent(t, dir, "n"))
	r := requester(t, dir)
	err := r.Hold(context.Background(), vol, "n", func() error {
		return r.Hold(context.Background(), vol, "n", func() error { return errors.New("second clone ran") })
	})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("nested Hold = %v, want ErrBusy", err)
	}
	if k.isFrozen("/s") {
		t.Error("left frozen")
	}
}

// A controller that dies while the filesystem is frozen drops its owner
// lock with its last breath: the node thaws at once, without waiting for
// the lease, and the next controller replaces the dead one's request.
func TestDeadControllerIsThawed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease time.Duration
		die   bool
	}{
		{"process gone", 0, true},
		{"lease ran out", 150 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			k := newKernel()
			k.mounts[vol] = "/s"
			start(t, k.agent(t, dir, "n"))
			dead := requester(t, dir)
			own, err := dead.owner.get(dead.dir)
			if err != nil {
				t.Fatal(err)
			}
			// Reachable to the end: unreachable, its owner file would be
			// closed by the GC's finalizer, and "lease ran out" would see
			// its controller die instead (the lock of a live process is
			// what that case is about).
			t.Cleanup(func() { _ = dead.Close() })
			// Frozen under a lease that cannot run out first, however slow
			// the host: a 150 ms lease from the start could end before the
			// agent's freeze (under load), and the test would see no freeze.
			req := request{Version: version, VolumeID: vol, Node: "n", Token: "dead", Deadline: time.Now().Add(time.Hour), Owner: own}
			if err := dead.publish(req); err != nil {
				t.Fatal(err)
			}
			if _, err := dead.waitAnswer(context.Background(), req); err != nil || !k.isFrozen("/s") {
				t.Fatalf("first freeze: %v, frozen %v", err, k.isFrozen("/s"))
			}
			if tc.die {
				dead.owner.f.Close() // the kernel drops the lock of a dead process
			} else {
				// The controller's last renewal (as its renewer writes it),
				// then none: the lease runs out.
				req.Deadline = time.Now().Add(tc.lease)
				if err := writeJSON(dead.dir, req.Owner, reqPath(dead.dir, req.VolumeID), req, true); err != nil {
					t.Fatal(err)
				}
			}
			// The agent polls every 20 ms; the bound is for a host busy
			// with other work (the loop ends as soon as it thaws).
			deadline := time.Now().Add(10 * time.Second)
			for k.isFrozen("/s") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if k.isFrozen("/s") {
				t.Fatal("still frozen ten seconds after its controller was gone")
			}
			if err := requester(t, dir).Hold(context.Background(), vol, "n", func() error { return nil }); err != nil {
				t.Fatalf("the next controller: %v", err)
			}
		})
	}
}

// A retried request, after the controller that made the first one was
// restarted, replaces it at once instead of waiting out its lease.
func TestRestartedControllerTakesOver(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	k.mounts[vol] = "/s"
	dead := requester(t, dir)
	own, err := dead.owner.get(dead.dir)
	if err != nil {
		t.Fatal(err)
	}
	stale := request{Version: version, VolumeID: vol, Node: "n", Token: "old", Deadline: time.Now().Add(time.Hour), Owner: own}
	if err := dead.publish(stale); err != nil {
		t.Fatal(err)
	}
	dead.owner.f.Close()
	start(t, k.agent(t, dir, "n"))
	frozen := false
	if err := requester(t, dir).Hold(context.Background(), vol, "n", func() error { frozen = k.isFrozen("/s"); return nil }); err != nil || !frozen {
		t.Fatalf("Hold after a dead controller's request = %v (frozen during the clone: %v)", err, frozen)
	}
	if k.isFrozen("/s") {
		t.Error("left frozen")
	}
}

// A node killed while a filesystem is frozen thaws it when it starts.
func TestKilledNodeThawsItsLeftovers(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	k.mounts[vol] = "/s"
	k.frozen["/s"] = true
	k.marks = []string{vol}
	k.agent(t, dir, "n").ThawLeftovers()
	if k.isFrozen("/s") || k.markCount() != 0 {
		t.Errorf("after ThawLeftovers: frozen %v, marks %d", k.isFrozen("/s"), k.markCount())
	}
}

// A filesystem someone else froze is cloned as it is and left frozen.
func TestForeignFreezeIsLeftFrozen(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	k.mounts[vol] = "/s"
	k.frozen["/s"] = true
	start(t, k.agent(t, dir, "n"))
	if err := requester(t, dir).Hold(context.Background(), vol, "n", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !k.isFrozen("/s") {
		t.Error("thawed a filesystem somebody else froze")
	}
}

func TestFreezeOnAFullPoolIsNoSpace(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	k.mounts[vol] = "/s"
	k.failEIO = true
	start(t, k.agent(t, dir, "n"))
	err := requester(t, dir).Hold(context.Background(), vol, "n", func() error { return errors.New("clone ran") })
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Hold = %v, want ErrNoSpace", err)
	}
	if k.markCount() != 0 || k.isLocked(vol) {
		t.Errorf("after a failed freeze: marks %d, locked %v", k.markCount(), k.isLocked(vol))
	}
}

// The node's lock is busy (a stage runs): the agent answers once it is free.
func TestBusyVolumeIsAnsweredWhenFree(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	k.mounts[vol] = "/s"
	k.locked[vol] = true
	start(t, k.agent(t, dir, "n"))
	go func() {
		time.Sleep(100 * time.Millisecond)
		k.mu.Lock()
		delete(k.locked, vol)
		k.mu.Unlock()
	}()
	frozen := false
	if err := requester(t, dir).Hold(context.Background(), vol, "n", func() error { frozen = k.isFrozen("/s"); return nil }); err != nil || !frozen {
		t.Fatalf("Hold = %v, frozen during clone %v", err, frozen)
	}
}
