// Package ceph_test holds the experiments behind
// docs/shared-pools-cephfs.md: what a CephFS, mounted by simulated nodes
// with ceph-fuse (internal/testutil/ceph), does to files, OFD locks, loop
// devices, quotas and snapshots, and what evicting or blocklisting a
// client does to its locks and writes. Each test asserts what was observed
// on Ceph 16.2.15 and Linux 6.18, so that a change of behaviour fails it,
// and logs the figures. The package's tests share one cluster (its start
// is most of the run's time); each test mounts its own nodes and works in
// a directory of its own. They run as root and skip otherwise.
//
//	go test -count=1 -v ./test/ceph/
package ceph_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	hostofd "github.com/filevol/filevol/internal/hostos/ofd"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/proc"
)

var runStart = time.Now()

func TestMain(m *testing.M) {
	if dir := os.Getenv(cloneChildEnv); dir != "" {
		cloneChild(dir) // TestDirectoryCloneKilledOnCephFS's worker
		return
	}
	code := proc.Cleanup(ceph.Main(m))
	os.Stderr.WriteString("test/ceph: whole run (cluster start and teardown included) " + time.Since(runStart).Round(time.Millisecond).String() + "\n")
	os.Exit(code)
}

// twoNodes mounts the shared cluster's CephFS on node-a and node-b (as a
// shared pool's clients: the page cache off, the harness's ceph.conf) and
// returns each one's view of a directory of this test's own.
func twoNodes(t *testing.T) (*ceph.Cluster, string, string) {
	t.Helper()
	c := ceph.Shared(t)
	a, b := c.MountNode(t, "node-a"), c.MountNode(t, "node-b")
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if err := os.Mkdir(filepath.Join(a, name), 0o755); err != nil {
		t.Fatal(err)
	}
	return c, filepath.Join(a, name), filepath.Join(b, name)
}

// ofd takes (F_WRLCK, F_RDLCK) or drops (F_UNLCK) a whole-file OFD lock on
// f, without waiting, the way filevol does (internal/hostos/ofd): a lock
// held elsewhere still reads as EAGAIN.
func ofd(f *os.File, typ int16) error {
	if typ == unix.F_UNLCK {
		return hostofd.Kernel{}.Unlock(f, hostofd.Whole)
	}
	return hostofd.Kernel{}.TryLock(f, hostofd.Type(typ), hostofd.Whole)
}

// waitLock retries a whole-file OFD write lock on f every 20 ms while it
// fails with EAGAIN, for at most max: how long it took, and the last
// error (nil when granted).
func waitLock(f *os.File, max time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		err := ofd(f, unix.F_WRLCK)
		if err == nil || !errors.Is(err, unix.EAGAIN) || time.Since(start) > max {
			return time.Since(start), err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// open opens (creating) path read-write and closes it at cleanup.
func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// writeSync replaces path's content and fsyncs it.
func writeSync(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

const mib = 1 << 20

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
