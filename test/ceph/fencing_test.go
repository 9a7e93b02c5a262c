package ceph_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/filevol/filevol/test/errno"
	"golang.org/x/sys/unix"
)

// Blocklisting a live client (ceph osd blocklist add, as a controller
// would fence a node): the MDS drops it, node-b gets the lock it
// held within seconds, its later writes fail, and node-b sees only what it
// wrote before.
func TestBlocklistedClientIsFenced(t *testing.T) {
	c, a, b := twoNodes(t)
	fa := open(t, filepath.Join(a, "img"))
	if err := ofd(fa, unix.F_WRLCK); err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt([]byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	fb := open(t, filepath.Join(b, "img"))
	if _, err := waitLock(fb, 500*time.Millisecond); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("node-b locked node-a's image: %v", err)
	}
	start := time.Now()
	s := c.Blocklist(t, "node-a")
	t.Cleanup(func() {
		c.KillClient(t, "node-a") // its mount is dead: no unmount waits on it
		c.Unblocklist(t, s)
	})
	took, err := waitLock(fb, 30*time.Second)
	if err != nil {
		t.Fatalf("node-b still cannot lock the image %v after node-a (%s) was blocklisted: %v", took, s.Addr, err)
	}
	t.Logf("node-b got the lock %v after the blocklist command (%v after it returned)", time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
	_, werr := fa.WriteAt([]byte("after!"), 0)
	serr := fa.Sync()
	t.Logf("node-a after the blocklist: write %s, fsync %s", errno.Name(werr), errno.Name(serr))
	if werr == nil && serr == nil {
		t.Error("node-a's write and fsync after its blocklisting succeeded")
	}
	got := make([]byte, 6)
	if _, err := fb.ReadAt(got, 0); err != nil || string(got) != "before" {
		t.Errorf("node-b reads %q, %v, want what node-a wrote before its blocklisting", got, err)
	}
}

// A client killed (SIGKILL to ceph-fuse) stays known to the MDS, with its locks,
// until the MDS evicts it: node-b, which had the file open before, is
// refused meanwhile. An eviction frees the lock within seconds. (Left
// alone the MDS marks it stale after session_timeout, 60 s, and
// closes it after session_autoclose, 300 s; a new open of the file through
// node-b waited about 60 s.)
func TestEvictAfterKillFreesTheLock(t *testing.T) {
	c, a, b := twoNodes(t)
	fa, err := os.OpenFile(filepath.Join(a, "img"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if err := ofd(fa, unix.F_WRLCK); err != nil {
		t.Fatal(err)
	}
	fb := open(t, filepath.Join(b, "img"))
	if err := ofd(fb, unix.F_WRLCK); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("node-b locked node-a's file: %v", err)
	}
	s := c.Client(t, "node-a")
	c.KillClient(t, "node-a")
	const watch = 3 * time.Second
	if took, err := waitLock(fb, watch); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("node-b locked the file %v after node-a's client was killed, before an eviction: %v", took, err)
	}
	start := time.Now()
	c.Ceph(t, "tell", "mds.a", "client", "evict", "id="+itoa(s.ID))
	t.Cleanup(func() { c.Unblocklist(t, s) })
	took, err := waitLock(fb, 30*time.Second)
	if err != nil {
		t.Fatalf("node-b still cannot lock %v after the eviction: %v", took, err)
	}
	t.Logf("node-b refused for %v after the kill; got the lock %v after the evict command (%v after it returned)", watch, time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
}
