package faults

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/internal/testutil/gluster"
)

// Tests of what the kill-point watcher sees, on the kernel and storage
// the shared-pool kill test runs on.

// seen is how often the watcher has seen point, once it has taken in
// everything before the call.
func seen(w *watcher, st *stats, point string) int {
	w.drain()
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.points[point]
}

// TestWatcherSeesLoopDevices: a loop device attached to, then detached
// from, a file under the watched roots is one boundary each; a device on
// a file elsewhere (another test's) is none.
func TestWatcherSeesLoopDevices(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	pool, other := filepath.Join(dir, "pool"), filepath.Join(dir, "other")
	for _, d := range []string{pool, other} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "img"), make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st := newStats()
	w, err := watchKillPointsOf(watchSpec{pool: pool, barrierDir: pool, kubelet: dir, loopRoots: []string{pool}}, st, func() *instance { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	// The watcher reads what a device is backed by when it takes in the
	// device's uevent, so a change it is to see must last until then (as an
	// attach lasts while the stage goes on): each step waits to be seen.
	waitSeen := func(point string, want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for seen(w, st, point) < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, d := range []string{other, pool} {
		dev, err := loop.Attach(context.Background(), filepath.Join(d, "img"), loop.Options{Lock: true})
		if err != nil {
			t.Fatal(err)
		}
		if d == pool {
			waitSeen(loopAttached, 1)
		}
		if err := loop.Detach(dev.Path); err != nil {
			t.Fatal(err)
		}
	}
	// The detach of the kernel may complete after LOOP_CLR_FD returns.
	waitSeen(loopDetached, 1)
	if a, d := seen(w, st, loopAttached), seen(w, st, loopDetached); a != 1 || d != 1 {
		t.Errorf("saw %d attaches and %d detaches, want 1 and 1 (the device on the pool's file, not the other)", a, d)
	}
}

// TestWatcherOnBrickSeesEveryClient is why a shared pool on GlusterFS is
// watched on its brick: inotify on one client's FUSE mount does not see a
// file another client makes; on the brick it sees every client's.
func TestWatcherOnBrickSeesEveryClient(t *testing.T) {
	g := gluster.Start(t, sharedGluster)
	a := filepath.Join(g.MountNode(t, "node-a", sharedClientArgs...), "pool")
	b := filepath.Join(g.MountNode(t, "node-b", sharedClientArgs...), "pool")
	if err := os.Mkdir(a, 0o750); err != nil {
		t.Fatal(err)
	}
	brick := filepath.Join(g.BrickDir(), "pool")
	checkEveryClientSeen(t, a, b, watchSpec{pool: brick, barrierDir: a}, "on the brick", "the brick is not needed")
}

// checkEveryClientSeen: node-b, then node-a, makes a file in the pool (a
// and b, each node's mount of it). A watcher of all (a spec of whole, told
// of as where) sees both files once; one of node-a's mount alone sees
// node-a's file and not node-b's (else, moot says what is not needed). It
// returns the first watcher and its stats, open until the test's end.
func checkEveryClientSeen(t *testing.T, a, b string, all watchSpec, where, moot string) (*watcher, *stats) {
	t.Helper()
	stAll, stOne := newStats(), newStats()
	none := func() *instance { return nil }
	all.kubelet = t.TempDir()
	whole, err := watchKillPointsOf(all, stAll, none)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(whole.close)
	onA, err := watchKillPointsOf(watchSpec{pool: a, barrierDir: a, kubelet: t.TempDir()}, stOne, none)
	if err != nil {
		t.Fatal(err)
	}
	defer onA.close()
	if err := os.WriteFile(filepath.Join(b, "from-b"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "from-a"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"from-a", "from-b"} {
		if n := seen(whole, stAll, "pool "+f+" created"); n != 1 {
			t.Errorf("%s: %s created seen %d times, want 1", where, f, n)
		}
	}
	if n := seen(onA, stOne, "pool from-a created"); n != 1 {
		t.Errorf("on node-a's mount: node-a's own file seen %d times, want 1", n)
	}
	if n := seen(onA, stOne, "pool from-b created"); n != 0 {
		t.Errorf("on node-a's mount: node-b's file seen %d times: inotify on FUSE does see other clients now; %s", n, moot)
	}
	return whole, stAll
}

// TestWatcherOnCephFSMountsSeesEveryClient is why a shared pool on CephFS
// is watched on every process's mount (watchSpec.mirrors): there is no
// brick, and inotify on one ceph-fuse mount does not see a file another
// client makes. Watched on both mounts, both clients' files are seen,
// and so is a file one client makes in a directory the other made after
// the watch began, once drain has looked again. -ceph only: the cluster's
// start is 10-25 s.
func TestWatcherOnCephFSMountsSeesEveryClient(t *testing.T) {
	if !*cephFlag {
		t.Skip("-ceph runs it (make faults)")
	}
	testutil.RequireRoot(t)
	c := ceph.Shared(t)
	dir := ceph.TestDir(t)
	a := filepath.Join(c.MountNode(t, "node-a"), dir, "pool")
	b := filepath.Join(c.MountNode(t, "node-b"), dir, "pool")
	if err := os.MkdirAll(a, 0o750); err != nil {
		t.Fatal(err)
	}
	both, stBoth := checkEveryClientSeen(t, a, b, watchSpec{pool: a, barrierDir: a, mirrors: []string{b}}, "on both mounts", "the mirrors are not needed")
	// A directory node-a makes; node-b then writes in it.
	if err := os.Mkdir(filepath.Join(a, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	both.drain()
	if err := os.WriteFile(filepath.Join(b, "sub", "from-b"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := seen(both, stBoth, "pool sub/from-b created"); n != 1 {
		t.Errorf("node-b's file in node-a's new directory seen %d times, want 1", n)
	}
	if err := both.watchErr(); err != nil {
		t.Error(err)
	}
}
