package ceph_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/filevol/filevol/test/errno"
	"golang.org/x/sys/unix"
)

// With the FUSE page cache off (fuse_disable_pagecache, as a shared pool
// requires), what node-a writes and fsyncs is what node-b's next read
// returns, every time, also when the size changes. What node-c, mounted
// with the page cache on (ceph-fuse's default), reads through a file it
// keeps open is logged only: an earlier measurement saw it read stale
// data, this test has not (docs/shared-pools-cephfs.md).
func TestCoherence(t *testing.T) {
	c, a, b := twoNodes(t)
	cc := filepath.Join(c.MountNode(t, "node-c", "--fuse_disable_pagecache=false"), filepath.Base(a))
	const rounds = 50
	var worst time.Duration
	for i := range rounds {
		want := "version " + strconv.Itoa(i) + " " + string(bytes.Repeat([]byte("x"), i*37))
		writeSync(t, filepath.Join(a, "record"), want)
		start := time.Now()
		got, err := os.ReadFile(filepath.Join(b, "record"))
		worst = max(worst, time.Since(start))
		if err != nil || string(got) != want {
			t.Fatalf("round %d: node-b read %q (%v) after node-a wrote %q", i, got, err, want)
		}
	}
	t.Logf("page cache off: node-b read node-a's write at once in %d of %d rounds (slowest read %v)", rounds, rounds, worst.Round(time.Microsecond))

	// The page cache on: node-c reads through a file it keeps open, node-a
	// rewrites it (same size), node-c reads again.
	writeSync(t, filepath.Join(a, "cached"), "old content")
	fc, err := os.Open(filepath.Join(cc, "cached"))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	got := make([]byte, 11)
	if _, err := fc.ReadAt(got, 0); err != nil || string(got) != "old content" {
		t.Fatalf("node-c: %q, %v", got, err)
	}
	writeSync(t, filepath.Join(a, "cached"), "new content")
	_, err = fc.ReadAt(got, 0)
	t.Logf("page cache on: node-c reads %q (%s) through its open file after node-a wrote %q", got, errno.Name(err), "new content")
}

// A quota set through node-a (ceph.quota.max_bytes) is enforced for
// node-b: its writes fail with EDQUOT once the directory holds about the
// quota (the client checks before a write, with the sizes it knows:
// measured up to 128 KiB past it).
func TestQuotaEnforcedOnOtherClient(t *testing.T) {
	_, a, b := twoNodes(t)
	const quota = 8 * mib
	if err := os.Mkdir(filepath.Join(a, "q"), 0o755); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	if err := unix.Setxattr(filepath.Join(a, "q"), "ceph.quota.max_bytes", []byte(strconv.Itoa(quota)), 0); err != nil {
		t.Fatalf("set the quota: %v", err)
	}
	buf := bytes.Repeat([]byte("q"), 256<<10)
	var written int64
	var werr error
	var tries int
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); tries++ {
		written, werr = fill(filepath.Join(b, "q", "data"), buf, 2*quota)
		if errors.Is(werr, unix.EDQUOT) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("node-b: %s after %d bytes (quota %d), %v after the quota was set (%d tries)", errno.Name(werr), written, quota, time.Since(set).Round(time.Millisecond), tries)
	if !errors.Is(werr, unix.EDQUOT) {
		t.Fatalf("node-b wrote %d bytes past a quota of %d: %v, want EDQUOT", written, quota, werr)
	}
	if written > quota+mib {
		t.Errorf("node-b wrote %d bytes under a quota of %d", written, quota)
	}
	if v, err := getxattr(filepath.Join(b, "q"), "ceph.quota.max_bytes"); err != nil || v != strconv.Itoa(quota) {
		t.Errorf("node-b reads the quota as %q, %v", v, err)
	}
}

// fill truncates path and writes buf to it until limit bytes or an error
// (the write's or fsync's): the bytes written, and the error.
func fill(path string, buf []byte, limit int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for n < limit {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			return n, err
		}
	}
	return n, f.Sync()
}

func getxattr(path, name string) (string, error) {
	b := make([]byte, 256)
	n, err := unix.Getxattr(path, name, b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// A snapshot made through node-a (mkdir DIR/.snap/NAME) is read-only and
// keeps the content of its time after an overwrite, an append and an
// unlink, as both clients see it.
func TestSnapshots(t *testing.T) {
	_, a, b := twoNodes(t)
	writeSync(t, filepath.Join(a, "f"), "before the snapshot")
	writeSync(t, filepath.Join(a, "gone"), "unlinked after the snapshot")
	start := time.Now()
	if err := os.Mkdir(filepath.Join(a, ".snap", "s1"), 0o755); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Logf("snapshot made in %v", time.Since(start).Round(time.Millisecond))
	writeSync(t, filepath.Join(a, "f"), "after")
	af, err := os.OpenFile(filepath.Join(a, "f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	af.WriteString(", appended")
	af.Close()
	if err := os.Remove(filepath.Join(a, "gone")); err != nil {
		t.Fatal(err)
	}
	for node, dir := range map[string]string{"node-a": a, "node-b": b} {
		snap := filepath.Join(dir, ".snap", "s1")
		if got, err := os.ReadFile(filepath.Join(snap, "f")); err != nil || string(got) != "before the snapshot" {
			t.Errorf("%s: the snapshot's f is %q, %v", node, got, err)
		}
		if got, err := os.ReadFile(filepath.Join(snap, "gone")); err != nil || string(got) != "unlinked after the snapshot" {
			t.Errorf("%s: the snapshot's unlinked file is %q, %v", node, got, err)
		}
		_, err := os.OpenFile(filepath.Join(snap, "f"), os.O_WRONLY, 0)
		if !errors.Is(err, unix.EROFS) {
			t.Errorf("%s: opening the snapshot's file for writing: %v, want EROFS", node, err)
		}
		if err := os.WriteFile(filepath.Join(snap, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("%s: creating a file in the snapshot: %v, want EROFS", node, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(b, "f")); err != nil || string(got) != "after, appended" {
		t.Errorf("node-b: the live f is %q, %v", got, err)
	}
}

// No reflinks on CephFS (FICLONE: EOPNOTSUPP), but copy_file_range copies
// (on the OSDs, without the data passing through the client).
func TestCloneAndCopyFileRange(t *testing.T) {
	_, a, _ := twoNodes(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 4*mib/16)
	src := filepath.Join(a, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := open(t, filepath.Join(a, "dst"))
	if err := unix.IoctlFileClone(int(d.Fd()), int(s.Fd())); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("FICLONE: %v, want EOPNOTSUPP", err)
	}
	start := time.Now()
	var done int
	for done < len(data) {
		n, err := unix.CopyFileRange(int(s.Fd()), nil, int(d.Fd()), nil, len(data)-done, 0)
		if err != nil || n == 0 {
			t.Fatalf("copy_file_range after %d bytes: %d, %v", done, n, err)
		}
		done += n
	}
	t.Logf("FICLONE refused; copy_file_range copied %d MiB in %v", len(data)/mib, time.Since(start).Round(time.Millisecond))
	got, err := os.ReadFile(filepath.Join(a, "dst"))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("the copy: %d bytes, %v", len(got), err)
	}
}
