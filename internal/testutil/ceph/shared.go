package ceph

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// One cluster per test package: a start costs 15-25 s, a test's nodes a
// second. Shared starts it at the first call and Main tears it down after
// the package's tests; each test mounts its own nodes (torn down at its
// end) and works in a directory of its own.
var shared struct {
	once sync.Once
	c    *Cluster
	skip string
	err  error
}

// Main runs the package's tests (m.Run) and then tears down the cluster
// Shared started, if any; its result is the exit code:
//
//	func TestMain(m *testing.M) { os.Exit(ceph.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.teardown(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
			fmt.Fprintf(os.Stderr, "ceph: teardown: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared is the package's cluster, started by the first call (whose test
// logs the start); every later call returns it, or skips or fails as the
// start did. The package's TestMain must call Main.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() { shared.c, shared.skip, shared.err = start(t.Logf) })
	if shared.skip != "" {
		t.Skip(shared.skip)
	}
	if shared.err != nil {
		t.Fatalf("ceph: the shared cluster did not start: %v", shared.err)
	}
	return shared.c
}
