package ceph_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/test/errno"
)

// A directory pool on a ceph-fuse mount holds each volume to its size by
// a CephFS quota: writes past it fail with EDQUOT on the node that made
// it and on another; an expansion lets more in at once; usage is the
// MDS's count; a quota a pod lifts is put back by the guard; a delete
// removes the tree, snapshots a pod took in it included; a pool opened
// again finds its volumes.
func TestDirectoryPoolOnCephFS(t *testing.T) {
	_, a, b := twoNodes(t)
	ctx := context.Background()
	p, err := dirpool.Open(a, dirpool.Options{NodeID: "node-a", GuardInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Close() }()
	if m := p.QuotaMode(); !strings.Contains(m, "cephfs quota") {
		t.Fatalf("quota mode %q, want the CephFS quota", m)
	}
	const size = 8 * mib
	start := time.Now()
	cv, err := p.Create(ctx, volume.CreateRequest{Name: "v1", CapacityBytes: size,
		Parameters: map[string]string{dirpool.ParamUID: "1000", dirpool.ParamGID: "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create: %v", time.Since(start).Round(time.Millisecond))
	if cv.Context[dirpool.ContextSizeEnforced] != "true" {
		t.Errorf("volume context %v, want the size enforced", cv.Context)
	}
	v, err := p.Record(cv.ID)
	if err != nil {
		t.Fatal(err)
	}
	va, vb := filepath.Join(a, v.Path), filepath.Join(b, v.Path)
	if q, err := getxattr(vb, "ceph.quota.max_bytes"); err != nil || q != strconv.Itoa(size) {
		t.Fatalf("node-b reads the volume's quota as %q, %v", q, err)
	}

	wantEDQUOT(t, "node-a", filepath.Join(va, "a"), size, size)
	wantEDQUOT(t, "node-b", filepath.Join(vb, "b"), size, 0) // a's bytes are there already
	for _, f := range []string{"a", "b"} {
		if err := os.Remove(filepath.Join(va, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(va, "sub"), 0o755); err != nil || os.Chown(filepath.Join(va, "sub"), 1000, 1000) != nil {
		t.Fatal(err)
	}

	start = time.Now()
	if _, err := p.Expand(ctx, v.ID, 2*size, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("expand: %v", time.Since(start).Round(time.Millisecond))
	wantEDQUOT(t, "node-b after expansion", filepath.Join(vb, "c"), 2*size, 2*size)
	used, limit, err := waitUsage(p, v.ID, 2*size)
	t.Logf("usage after the expansion: %d of %d", used, limit)
	if err != nil || limit != 2*size || used < 2*size {
		t.Errorf("usage %d of %d (%v), want at least %d of %d", used, limit, err, 2*size, 2*size)
	}

	// A pod running as the volume's owner may lift the quota; the guard
	// puts it back.
	asUser(t, 1000, func() error { return unix.Setxattr(vb, "ceph.quota.max_bytes", []byte("0"), 0) })
	if q, err := getxattr(va, "ceph.quota.max_bytes"); err == nil {
		t.Fatalf("the volume's owner set the quota to 0, node-a reads %q", q)
	}
	if err := p.GuardPass(); err != nil {
		t.Fatal(err)
	}
	if q, err := getxattr(va, "ceph.quota.max_bytes"); err != nil || q != strconv.Itoa(2*size) {
		t.Errorf("after the guard's pass the quota is %q, %v, want %d", q, err, 2*size)
	}
	if _, n := p.Repairs(v.ID); n != 1 || !strings.Contains(p.GuardNote(v.ID), "CephFS quota") {
		t.Errorf("the guard's repairs: %d, note %q", n, p.GuardNote(v.ID))
	}

	// Snapshots a pod took keep their directories from being removed
	// until they go; the delete removes them.
	for _, d := range []string{vb, filepath.Join(vb, "sub")} {
		asUser(t, 1000, func() error { return unix.Mkdir(filepath.Join(d, ".snap", "pods"), 0o755) })
	}
	// What a snapshot keeps counts against no limit: the volume is full
	// again once the file the snapshot holds is removed.
	if err := os.Remove(filepath.Join(va, "c")); err != nil {
		t.Fatal(err)
	}
	if used, _, err := waitUsage(p, v.ID, 0); err != nil || used != 0 {
		t.Fatalf("usage after the remove: %d, %v", used, err)
	}
	wantEDQUOT(t, "node-b with the first 16 MiB in a pod's snapshot", filepath.Join(vb, "d"), 2*size, 2*size)

	// Opened again, the pool finds the volume where it was.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if p, err = dirpool.Open(a, dirpool.Options{NodeID: "node-a", GuardInterval: -1}); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Record(v.ID); err != nil || got.Path != v.Path || got.CapacityBytes != 2*size {
		t.Fatalf("reopened: %+v, %v", got, err)
	}
	if f, err := p.OpenVolume(v.ID); err != nil {
		t.Fatalf("reopened: %v", err)
	} else {
		f.Close() // held open, it would keep node-a's client alive past the test
	}

	start = time.Now()
	if err := p.Delete(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	t.Logf("delete with two snapshots inside: %v", time.Since(start).Round(time.Millisecond))
	for _, d := range []string{vb, filepath.Join(b, ".filevol", "trash"), filepath.Join(b, ".filevol", "destroying")} {
		ents, err := os.ReadDir(d)
		if len(ents) != 0 || (err != nil && !errors.Is(err, os.ErrNotExist)) {
			t.Errorf("%s after the delete: %d entries, %v", d, len(ents), err)
		}
	}
	if _, err := os.Stat(vb); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume's directory after the delete: %v", err)
	}
}

// asUser runs fn as uid and gid (a pod's process, not root), on a
// thread of its own that ends with it, and fails t on fn's error.
func asUser(t *testing.T, uid int, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		// Raw calls change this thread only (Go's Setresuid changes all).
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- e
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- e
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatalf("as uid %d: %v", uid, err)
	}
}

// wantEDQUOT writes path until EDQUOT (retrying for a few seconds while
// the client learns of the quota) and checks that the bytes written were
// between want and want + limit. The client judges a write by the
// volume's bytes as the MDS last confirmed them, and asks the MDS again
// as the room left shrinks: on an idle machine one write passes the limit;
// under make test's load the MDS's answer came 1.4 MiB, and once (four
// test packages on CephFS and GlusterFS beside it, -race) 4.06 MiB, after
// an 8 MiB limit. The writer runs at the page cache's speed, so the
// overshoot is that speed times the MDS's delay, which only the load sets.
// What is checked is that a size is enforced: refused before the size
// again, where a writer without a quota is stopped at three times it.
func wantEDQUOT(t *testing.T, who, path string, limit, want int64) {
	t.Helper()
	buf := bytes.Repeat([]byte("q"), 64<<10)
	var n int64
	var err error
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		if n, err = fill(path, buf, 3*limit); errors.Is(err, unix.EDQUOT) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: %s after %d bytes (limit %d) in %v", who, errno.Name(err), n, limit, time.Since(start).Round(time.Millisecond))
	if !errors.Is(err, unix.EDQUOT) || n < want || n > want+limit {
		t.Errorf("%s: wrote %d bytes, then %v; want EDQUOT after %d to %d", who, n, err, want, want+limit)
	}
}

// waitUsage asks for the volume's usage until it counts at least min
// bytes, or none when min is 0 (the MDS propagates counts up the tree
// lazily), for 10 s.
func waitUsage(p *dirpool.Pool, id string, min int64) (used, limit int64, err error) {
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(200 * time.Millisecond) {
		if used, limit, err = p.Usage(id); err != nil || (min > 0 && used >= min) || (min == 0 && used == 0) {
			break
		}
	}
	return used, limit, err
}

// Deeper in a volume than its top directory the quota holds late: the
// client judges a write by the bytes the MDS last counted for the
// volume, and counts propagate up the tree lazily, so a writer two
// directories down gets EDQUOT after about a second of writing, however
// much that was (at 20 MiB/s here, twice an 8 MiB size). A quota a pod sets on a subdirectory (larger than the
// volume's) does not lift the volume's.
func TestDirectoryPoolQuotaDeepInTheTree(t *testing.T) {
	_, a, b := twoNodes(t)
	ctx := context.Background()
	p, err := dirpool.Open(a, dirpool.Options{NodeID: "node-a", GuardInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const size = 8 * mib
	for _, nested := range []bool{false, true} {
		name := map[bool]string{false: "deep", true: "nested"}[nested]
		cv, err := p.Create(ctx, volume.CreateRequest{Name: name, CapacityBytes: size})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := p.Record(cv.ID)
		dir := filepath.Join(a, v.Path, "sub", "deeper")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if nested {
			if err := unix.Setxattr(filepath.Dir(dir), "ceph.quota.max_bytes", []byte(strconv.Itoa(1<<40)), 0); err != nil {
				t.Fatal(err)
			}
		}
		n, took, err := appendUntil(filepath.Join(b, v.Path, "sub", "deeper", "f"), 10*time.Second)
		t.Logf("%s: node-b wrote %d bytes (%.1f times the size) two directories down in %v, then %s",
			name, n, float64(n)/size, took.Round(time.Millisecond), errno.Name(err))
		if !errors.Is(err, unix.EDQUOT) {
			t.Errorf("%s: node-b wrote %d bytes into a volume of %d for %v, then %v; want EDQUOT", name, n, size, took, err)
		}
		start := time.Now()
		if err := p.Delete(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
		if err := p.EmptyTrash(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: deleted in %v", name, time.Since(start).Round(time.Millisecond))
	}
}

// appendUntil appends 1 MiB every 50 ms (20 MiB/s: the overshoot is the
// rate times the delay, and the OSD of a test has better things to do
// than take hundreds of MiB) to path until an error or max: the bytes
// written, the time, the error.
func appendUntil(path string, max time.Duration) (int64, time.Duration, error) {
	buf := bytes.Repeat([]byte("d"), mib)
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	start := time.Now()
	var total int64
	for time.Since(start) < max {
		n, err := f.Write(buf)
		total += int64(n)
		if err != nil {
			return total, time.Since(start), err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return total, time.Since(start), nil
}
