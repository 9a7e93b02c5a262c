package reading

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/fake"
)

// gatedLoops counts the passes over the loop devices and holds each one
// until the test lets it finish.
type gatedLoops struct {
	hostos.Loops
	passes  atomic.Int32
	started chan struct{}
	release chan struct{}
}

func (g *gatedLoops) Index() (hostos.LoopIndex, error) {
	g.passes.Add(1)
	g.started <- struct{}{}
	<-g.release
	return g.Loops.Index()
}

// TestSharedReadingsNeverOlderThanTheCaller: callers that arrive while a
// reading is under way do not get it (it may have passed what they would
// see); they share the next, which starts when it ends and is made once
// for all of them.
func TestSharedReadingsNeverOlderThanTheCaller(t *testing.T) {
	k := fake.New()
	g := &gatedLoops{Loops: k.Host().Loops, started: make(chan struct{}, 4), release: make(chan struct{})}
	s := &Shared{host: hostos.Host{Loops: g, Mounts: k.Host().Mounts, FS: k.Host().FS}}
	ctx := context.Background()

	type got struct {
		r   *Reading
		err error
	}
	first := make(chan got, 1)
	go func() { r, err := s.Get(ctx); first <- got{r, err} }()
	<-g.started // the first reading is under way
	var wg sync.WaitGroup
	later := make([]got, 3)
	for i := range later {
		wg.Add(1)
		go func() { defer wg.Done(); r, err := s.Get(ctx); later[i] = got{r, err} }()
	}
	// The late callers are queued, not served the reading under way.
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.next != nil && s.next.waiters == len(later) })
	select {
	case <-g.started:
		t.Fatal("a second reading started while the first was under way")
	default:
	}
	g.release <- struct{}{}
	a := <-first
	<-g.started // the next reading, for the late callers
	g.release <- struct{}{}
	wg.Wait()
	if a.err != nil || a.r == nil {
		t.Fatalf("first caller: %v", a.err)
	}
	for i, l := range later {
		if l.err != nil || l.r == nil {
			t.Fatalf("late caller %d: %v", i, l.err)
		}
		if l.r == a.r {
			t.Fatalf("late caller %d got the reading that was under way when it arrived", i)
		}
		if l.r != later[0].r {
			t.Fatalf("late callers got different readings: they should share one")
		}
	}
	if n := g.passes.Load(); n != 2 {
		t.Fatalf("%d passes over the loop devices for four callers, want 2", n)
	}
	// Nothing under way now: the next caller starts its own at once.
	go func() { <-g.started; g.release <- struct{}{} }()
	if r, err := s.Get(ctx); err != nil || r == a.r || r == later[0].r {
		t.Fatalf("a caller after the readings ended got %p, %v; want a new reading", r, err)
	}
}

// TestSharedReadingsCancel: a caller waiting for the next reading leaves
// when its context ends; the reading still serves the others.
func TestSharedReadingsCancel(t *testing.T) {
	k := fake.New()
	g := &gatedLoops{Loops: k.Host().Loops, started: make(chan struct{}, 4), release: make(chan struct{})}
	s := &Shared{host: hostos.Host{Loops: g, Mounts: k.Host().Mounts, FS: k.Host().FS}}
	done := make(chan error, 1)
	go func() { _, err := s.Get(context.Background()); done <- err }()
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { _, err := s.Get(ctx); waited <- err }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.next != nil })
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	g.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-g.started // the queued reading still runs (its caller left)
	g.release <- struct{}{}
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.running })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}
