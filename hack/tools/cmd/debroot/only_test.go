package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// files writes each path (relative) under dir with some content.
func files(t *testing.T, dir string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		f := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func tree(t *testing.T, dir string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			got = append(got, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// -only keeps the path asked for, the package's copyright and status
// file, and the directories holding them; everything else goes, and a
// path the package lacks is refused.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	files(t, dir, "usr/bin/ceph", "usr/bin/rbd", "usr/lib/x86_64-linux-gnu/ceph/compressor/libceph_snappy.so.2",
		"usr/share/doc/ceph-common/copyright", "usr/share/doc/ceph-common/changelog.gz", "var/lib/dpkg/status.d/ceph-common")
	p := &pkg{name: "ceph-common", dir: dir}
	if err := prune(p, []string{"/usr/bin/ceph"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"usr", "usr/bin", "usr/bin/ceph", "usr/share", "usr/share/doc", "usr/share/doc/ceph-common",
		"usr/share/doc/ceph-common/copyright", "var", "var/lib", "var/lib/dpkg", "var/lib/dpkg/status.d", "var/lib/dpkg/status.d/ceph-common"}
	if got := tree(t, dir); !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	if err := prune(p, []string{"/usr/bin/ceph-conf"}); err == nil || !strings.Contains(err.Error(), "not in the package") {
		t.Errorf("a path the package lacks: %v", err)
	}
	o := onlyFlag{}
	for _, bad := range []string{"ceph-common", "ceph-common=usr/bin/ceph", "=/usr/bin/ceph", "x=/", "x=/usr/../bin"} {
		if o.Set(bad) == nil {
			t.Errorf("-only %s accepted", bad)
		}
	}
}

// A library in a private directory (librados2's
// usr/lib/<triplet>/ceph/libceph-common.so.2, reached by RUNPATH) has an
// owner; one in the standard directories is not listed again.
func TestPrivateLibs(t *testing.T) {
	dir := t.TempDir()
	files(t, dir, "usr/lib/x86_64-linux-gnu/librados.so.2", "usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2",
		"usr/lib/x86_64-linux-gnu/ceph/README")
	if got := privateLibs(dir); !slices.Equal(got, []string{"libceph-common.so.2"}) {
		t.Errorf("privateLibs %v, want [libceph-common.so.2]", got)
	}
}
