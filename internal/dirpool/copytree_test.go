package dirpool

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// copyTree on ext4, which reports holes (CephFS, which does not, is
// test/ceph's TestDirectoryPoolSnapshotsOnCephFS): a sparse file stays
// sparse, hard links stay one inode, owners, modes, times and user
// xattrs come along, a symlink pointing out of the tree is copied as a
// link, never followed; a tree larger than the limit or deeper than
// maxCopyDepth is refused with ErrInvalidArgument.
func TestCopyTree(t *testing.T) {
	src, dst := testutil.Scratch(t, "copytree-src"), testutil.Scratch(t, "copytree-dst")
	f, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data"), 32*mib); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, err := range []error{
		os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o640),
		os.Link(filepath.Join(src, "a"), filepath.Join(src, "b")),
		os.Symlink("/etc/passwd", filepath.Join(src, "out")),
		os.Lchown(filepath.Join(src, "out"), 7, 8),
		os.Chown(filepath.Join(src, "a"), 1000, 1001),
		unix.Setxattr(filepath.Join(src, "a"), "user.k", []byte("v"), 0),
		os.Mkdir(filepath.Join(src, "d"), 0o511),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	sfd, dfd := openDir(t, src), openDir(t, dst)
	bytesCopied, files, err := copyTree(sfd, dfd, 64*mib)
	if err != nil {
		t.Fatal(err)
	}
	if files != 4 || bytesCopied != 32*mib+4+1 { // b is a's second name
		t.Errorf("copied %d files, %d bytes", files, bytesCopied)
	}
	var sa, db, ds, sp unix.Stat_t
	for path, st := range map[string]*unix.Stat_t{filepath.Join(src, "a"): &sa, filepath.Join(dst, "b"): &db, filepath.Join(dst, "d"): &ds, filepath.Join(dst, "sparse"): &sp} {
		if err := unix.Lstat(path, st); err != nil {
			t.Fatal(err)
		}
	}
	var da unix.Stat_t
	_ = unix.Lstat(filepath.Join(dst, "a"), &da)
	if da.Ino != db.Ino || da.Uid != 1000 || da.Gid != 1001 || da.Mode != sa.Mode || da.Mtim != sa.Mtim {
		t.Errorf("a: %+v, source %+v", da, sa)
	}
	if ds.Mode&0o7777 != 0o511 || sp.Blocks*512 > 1*mib || sp.Size != 32*mib+4 {
		t.Errorf("d mode %o; sparse %d bytes in %d blocks", ds.Mode, sp.Size, sp.Blocks)
	}
	if v, err := os.ReadFile(filepath.Join(dst, "sparse")); err != nil || !bytes.Equal(v[32*mib:], []byte("data")) {
		t.Errorf("sparse content: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "out")); err != nil || l != "/etc/passwd" {
		t.Errorf("out: %q, %v", l, err)
	}
	if x, err := unix.Getxattr(filepath.Join(dst, "a"), "user.k", make([]byte, 8)); err != nil || x != 1 {
		t.Errorf("user.k: %d, %v", x, err)
	}

	small := testutil.Scratch(t, "copytree-small")
	if _, _, err := copyTree(sfd, openDir(t, small), mib); !errors.Is(err, volume.ErrInvalidArgument) || !strings.Contains(err.Error(), "larger volume") {
		t.Errorf("into 1 MiB: %v", err)
	}
	deep := testutil.Scratch(t, "copytree-deep")
	p := deep
	for range maxCopyDepth + 1 {
		p = filepath.Join(p, "d")
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := copyTree(openDir(t, deep), openDir(t, testutil.Scratch(t, "copytree-deep-dst")), mib); !errors.Is(err, volume.ErrInvalidArgument) {
		t.Errorf("a tree deeper than %d: %v", maxCopyDepth, err)
	}
}

func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
