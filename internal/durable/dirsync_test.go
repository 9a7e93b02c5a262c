package durable

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDir models a directory on a disk with a write cache: changes bump
// version; an fsync makes durable what the directory held when it
// started (it may write the blocks at any moment after that, so nothing
// later is covered). Each fsync blocks until the test releases it when
// gate is set.
type fakeDir struct {
	mu      sync.Mutex
	version int // changes made
	durable int // the highest version an ended fsync covered
	calls   int
	running int // fsyncs in progress at once (must stay ≤ 1)
	maxRun  int
	started chan struct{}   // one send per fsync start, when gated
	gate    chan struct{}   // one receive per fsync end, when gated
	fail    func(int) error // the error of the n-th fsync (1-based), if any
}

func (f *fakeDir) change() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	return f.version
}

func (f *fakeDir) fsync() error {
	f.mu.Lock()
	f.calls++
	n, covers := f.calls, f.version
	f.running++
	f.maxRun = max(f.maxRun, f.running)
	f.mu.Unlock()
	if f.gate != nil {
		f.started <- struct{}{}
		<-f.gate
	} else {
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
	}
	var err error
	if f.fail != nil {
		err = f.fail(n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running--
	if err == nil {
		f.durable = max(f.durable, covers)
	}
	return err
}

func gatedDir() *fakeDir {
	return &fakeDir{started: make(chan struct{}), gate: make(chan struct{})}
}

// waiters waits until the queued fsync of d serves n callers.
func waiters(t *testing.T, d *DirSync, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		d.mu.Lock()
		got := 0
		if d.queued != nil {
			got = d.queued.callers
		}
		d.mu.Unlock()
		if got == n {
			return
		}
	}
	t.Fatalf("never saw %d callers queued", n)
}

// TestDirSyncNeverCoveredByEarlierFsync: many callers change the directory
// and wait; each must find its own change durable when wait returns, i.e.
// it was released by an fsync that started after its change.
func TestDirSyncNeverCoveredByEarlierFsync(t *testing.T) {
	f := &fakeDir{}
	d := NewDirSync(f.fsync)
	const callers, rounds = 16, 200
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				m := d.Mark()
				v := f.change()
				if err := d.Wait(m); err != nil {
					t.Error(err)
					return
				}
				f.mu.Lock()
				if f.durable < v {
					bad.Add(1)
				}
				f.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d waits returned before their change was durable", bad.Load())
	}
	if f.maxRun > 1 {
		t.Errorf("%d fsyncs ran at once, want 1", f.maxRun)
	}
	if f.calls >= callers*rounds {
		t.Errorf("%d fsyncs for %d waits: none shared", f.calls, callers*rounds)
	}
	t.Logf("%d fsyncs for %d waits", f.calls, callers*rounds)
}

// TestDirSyncWaitsForAnFsyncThatStartsLater pins the order step by step: a
// caller arriving while an fsync runs is not released by it, and the
// callers that arrive meanwhile share the next one.
func TestDirSyncWaitsForAnFsyncThatStartsLater(t *testing.T) {
	f := gatedDir()
	d := NewDirSync(f.fsync)
	done := make(chan int, 4)
	call := func(i int) {
		m := d.Mark()
		f.change()
		if err := d.Wait(m); err != nil {
			t.Error(err)
		}
		done <- i
	}
	go call(0)
	<-f.started // fsync 1 runs, for caller 0
	for i := 1; i <= 3; i++ {
		go call(i)
	}
	waiters(t, d, 3)
	f.gate <- struct{}{} // fsync 1 ends
	if i := <-done; i != 0 {
		t.Fatalf("caller %d released by the fsync that started before its change", i)
	}
	<-f.started // fsync 2, for callers 1-3
	select {
	case i := <-done:
		t.Fatalf("caller %d released before the fsync that covers it ended", i)
	case <-time.After(20 * time.Millisecond):
	}
	f.gate <- struct{}{}
	for range 3 {
		<-done
	}
	if f.calls != 2 {
		t.Errorf("%d fsyncs, want 2 (one shared by the three latecomers)", f.calls)
	}
}

// TestDirSyncErrors: the callers of a failed fsync get its error; so does
// a caller whose change was made while it ran, although the fsync that
// released it succeeded (the failed one may have dropped its change);
// a caller that began after the failure does not.
func TestDirSyncErrors(t *testing.T) {
	eio := errors.New("input/output error")
	f := gatedDir()
	f.fail = func(n int) error {
		if n == 1 {
			return eio
		}
		return nil
	}
	d := NewDirSync(f.fsync)
	errs := make(chan error, 2)
	go func() { m := d.Mark(); f.change(); errs <- d.Wait(m) }()
	<-f.started // fsync 1 (fails) runs
	// Marked and changed while fsync 1 runs; waits after it ended.
	late := d.Mark()
	f.change()
	f.gate <- struct{}{}
	if err := <-errs; !errors.Is(err, eio) {
		t.Fatalf("caller of the failed fsync: %v, want %v", err, eio)
	}
	go func() { errs <- d.Wait(late) }()
	<-f.started // fsync 2 (succeeds)
	f.gate <- struct{}{}
	if err := <-errs; !errors.Is(err, eio) {
		t.Errorf("caller whose change a failed fsync may have dropped: %v, want %v", err, eio)
	}
	go func() { m := d.Mark(); f.change(); errs <- d.Wait(m) }()
	<-f.started
	f.gate <- struct{}{}
	if err := <-errs; err != nil {
		t.Errorf("caller that began after the failure: %v", err)
	}
}
