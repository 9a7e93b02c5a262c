package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// harnessTB lends the project's test harnesses (internal/testutil/ceph and
// gluster), which take a testing.TB for their cleanups, failures and skips,
// to this command. It is the *testing.B of testing.Benchmark with the
// messages kept: the B of testing.Benchmark discards its output, and a
// cluster that failed to start must say why in the report.
type harnessTB struct {
	testing.TB
	name string
	mu   sync.Mutex
	msgs []string
}

// withHarness runs f with a testing.TB the harnesses accept, once: the
// TB's cleanups (the clusters' teardowns) run when f returns or a harness
// ends it with Fatal or Skip. The result is f's error, or what ended it.
func withHarness(name string, f func(tb testing.TB) error) error {
	h := &harnessTB{name: name}
	var ferr error
	returned := false
	testing.Benchmark(func(b *testing.B) {
		if h.TB != nil {
			return // testing.Benchmark never calls twice after SkipNow; kept safe
		}
		h.TB = b
		ferr = f(h)
		returned = true
		// Finished: testing.Benchmark would otherwise call f again with a
		// larger b.N when it returned within the benchmark time.
		b.SkipNow()
	})
	if returned {
		return errors.Join(ferr, h.failure())
	}
	if err := h.failure(); err != nil {
		return err
	}
	return errors.New(name + ": ended without a message")
}

// failure is the recorded Error, Fatal and Skip messages, if any.
func (h *harnessTB) failure() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(h.msgs, "; "))
}

func (h *harnessTB) record(s string) {
	h.mu.Lock()
	h.msgs = append(h.msgs, s)
	h.mu.Unlock()
	fmt.Fprintf(os.Stderr, "bench: %s: %s\n", h.name, s)
}

// Name names the scratch directories the harnesses make.
func (h *harnessTB) Name() string { return h.name }

func (h *harnessTB) Log(a ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"bench: " + h.name + ":"}, a...)...)
}
func (h *harnessTB) Logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+h.name+": "+format+"\n", a...)
}
func (h *harnessTB) Error(a ...any) { h.record(fmt.Sprint(a...)); h.TB.Fail() }
func (h *harnessTB) Errorf(format string, a ...any) {
	h.record(fmt.Sprintf(format, a...))
	h.TB.Fail()
}
func (h *harnessTB) Fatal(a ...any) { h.record(fmt.Sprint(a...)); h.TB.FailNow() }
func (h *harnessTB) Fatalf(format string, a ...any) {
	h.record(fmt.Sprintf(format, a...))
	h.TB.FailNow()
}
func (h *harnessTB) Skip(a ...any) { h.record("skipped: " + fmt.Sprint(a...)); h.TB.SkipNow() }
func (h *harnessTB) Skipf(format string, a ...any) {
	h.record("skipped: " + fmt.Sprintf(format, a...))
	h.TB.SkipNow()
}
