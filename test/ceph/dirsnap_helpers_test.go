package ceph_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/volume"
)

// openDirPool opens the directory pool in dir as node <dir's base>; the
// returned func closes it, and cleanup does unless it did.
func openDirPool(t *testing.T, dir string) (*dirpool.Pool, func()) {
	t.Helper()
	p, err := dirpool.Open(dir, dirpool.Options{NodeID: filepath.Base(dir), GuardInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeIt := func() {
		once.Do(func() {
			if err := p.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(closeIt)
	return p, closeIt
}

// dirVolume creates a volume of uid and gid 1000 (from src, if set).
func dirVolume(t *testing.T, p *dirpool.Pool, name string, size int64, src *volume.ContentSource) dirpool.Volume {
	t.Helper()
	cv, err := p.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: size, Source: src,
		Parameters: map[string]string{dirpool.ParamUID: "1000", dirpool.ParamGID: "1000"}})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	v, err := p.Record(cv.ID)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// treeData is fillTree's file "data".
var treeData = bytes.Repeat([]byte("filevol "), mib/8)

// fillTree makes what a copy must keep: a file with an xattr, owners and
// modes (a set-uid bit, a directory of mode 0750), a symlink, two names
// of one inode, a sparse file (4 KiB of data at 6 MiB of 8 MiB), a fifo
// and a deep path.
func fillTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "data"), treeData, 0o640))
	must(unix.Setxattr(filepath.Join(dir, "data"), "user.note", []byte("kept"), 0))
	must(os.MkdirAll(filepath.Join(dir, "dir", "a", "b", "c"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "dir", "a", "b", "c", "deep"), []byte("deep"), 0o600))
	must(os.Symlink("../data", filepath.Join(dir, "dir", "link")))
	must(os.WriteFile(filepath.Join(dir, "dir", "hard"), []byte("one inode"), 0o644))
	must(os.Link(filepath.Join(dir, "dir", "hard"), filepath.Join(dir, "hard2")))
	must(os.WriteFile(filepath.Join(dir, "suid"), []byte("#!/bin/true\n"), 0o755))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o620))
	f, err := os.Create(filepath.Join(dir, "sparse"))
	must(err)
	_, err = f.WriteAt(bytes.Repeat([]byte{7}, 4096), 6*mib)
	must(err)
	must(f.Truncate(8 * mib))
	must(f.Sync())
	must(f.Close())
	must(filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, 1000, 1000)
	}))
	must(os.Chmod(filepath.Join(dir, "suid"), 0o4755))
	must(os.Chmod(filepath.Join(dir, "dir"), 0o750))
}

// sameTree compares the trees under src and dst (the roots' own owners
// and modes are their volumes'): names, types, owners, modes,
// modification times, contents, symlink targets, user xattrs, and which
// names share an inode.
func sameTree(t *testing.T, src, dst string) {
	t.Helper()
	inodes := map[string][2]uint64{} // rel → (src ino, dst ino)
	var names []string
	err := filepath.WalkDir(src, func(path string, _ fs.DirEntry, err error) error {
		if err != nil || path == src {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		names = append(names, rel)
		var s, d unix.Stat_t
		if err := unix.Lstat(path, &s); err != nil {
			return err
		}
		if err := unix.Lstat(filepath.Join(dst, rel), &d); err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		inodes[rel] = [2]uint64{s.Ino, d.Ino}
		dir := s.Mode&unix.S_IFMT == unix.S_IFDIR
		if !dir && s.Size != d.Size {
			t.Errorf("%s: %d bytes, copy %d", rel, s.Size, d.Size)
		}
		if s.Mode != d.Mode || s.Uid != d.Uid || s.Gid != d.Gid {
			t.Errorf("%s: mode %o %d:%d, copy %o %d:%d", rel, s.Mode, s.Uid, s.Gid, d.Mode, d.Uid, d.Gid)
		}
		if !dir && s.Mtim != d.Mtim {
			t.Errorf("%s: modified %v, copy %v", rel, s.Mtim, d.Mtim)
		}
		switch s.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			a, _ := os.ReadFile(path)
			b, err := os.ReadFile(filepath.Join(dst, rel))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s: the copy's content differs (%d, %d bytes, %v)", rel, len(a), len(b), err)
			}
			x, _ := getxattr(path, "user.note")
			if y, _ := getxattr(filepath.Join(dst, rel), "user.note"); x != y {
				t.Errorf("%s: user.note %q, copy %q", rel, x, y)
			}
		case unix.S_IFLNK:
			x, _ := os.Readlink(path)
			if y, err := os.Readlink(filepath.Join(dst, rel)); err != nil || x != y {
				t.Errorf("%s: link to %q, copy to %q, %v", rel, x, y, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range names {
		for _, y := range names {
			if x < y && (inodes[x][0] == inodes[y][0]) != (inodes[x][1] == inodes[y][1]) {
				t.Errorf("%s and %s: one inode in the source %t, in the copy %t", x, y, inodes[x][0] == inodes[y][0], inodes[x][1] == inodes[y][1])
			}
		}
	}
	var dstNames int
	_ = filepath.WalkDir(dst, func(string, fs.DirEntry, error) error { dstNames++; return nil })
	if dstNames != len(names)+1 {
		t.Errorf("the copy has %d entries, the source %d", dstNames-1, len(names))
	}
}

// snapNames lists the volume directory's .snap, sorted.
func snapNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, ".snap"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}
