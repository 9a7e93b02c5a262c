package dirpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
)

// What a pod calls to protect what it owns (the test's own numbers, so
// that the tests say nothing of the pool's helpers).
const (
	podImmutable      = 0x10       // FS_IMMUTABLE_FL
	podAppendOnly     = 0x20       // FS_APPEND_FL
	podSubvolSetflags = 0x4008941a // BTRFS_IOC_SUBVOL_SETFLAGS
	podSubvolRdonly   = 1 << 1     // BTRFS_SUBVOL_RDONLY
)

// setInodeFlags adds flags (chattr +i, +a) to fd's inode.
func setInodeFlags(fd int, add uint32) error {
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|add))
}

// chattr adds flags to the file or directory at path, not following a link.
func chattr(t *testing.T, path string, add uint32) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := setInodeFlags(fd, add); err != nil {
		t.Fatalf("chattr %#x %s: %v", add, path, err)
	}
}

// setReadOnly marks the subvolume whose root fd is open read-only (btrfs
// property set ro true), as its owner may.
func setReadOnly(fd int) error {
	flags := uint64(podSubvolRdonly)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), podSubvolSetflags, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return fmt.Errorf("btrfs property set ro true: %w", e)
	}
	return nil
}

// deleteToTheEnd deletes the volume and empties the trash, and checks
// that nothing of it is left: no volume, nothing in flight, no qgroup.
func deleteToTheEnd(t *testing.T, p *Pool, dir string, v Volume, base []string) {
	t.Helper()
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatalf("empty the trash: %v", err)
	}
	assertClean(t, p, dir, 0)
	settle(t, p, dir)
	wantQgroups(t, p, base, "after the delete")
}

// Whatever subvolumes a pod (a container's default capabilities) made
// inside its volume, the delete finishes: one under 130 directories of
// 200-byte names (26 KiB of path, far past PATH_MAX and the 64 levels
// the old walk gave up at); read-only ones holding others, a read-only
// snapshot of the volume among them, in a volume the pod made read-only
// too (its rename into the trash failed EROFS before).
func TestDeleteFinishesWhateverAPodNested(t *testing.T) {
	t.Run("deep", func(t *testing.T) {
		p, dir := newPool(t)
		base := qgroups(t, p)
		v := create(t, p, "deep", 16*mib, nil)
		vfd, err := p.openVolume(v)
		if err != nil {
			t.Fatal(err)
		}
		var podErr error
		dirpooltest.AsPod(t, dirpooltest.ContainerCaps, func() { podErr = nestDeep(vfd, 130, 200) })
		unix.Close(vfd) // an open root keeps a destroyed subvolume from the cleaner
		if podErr != nil {
			t.Fatal(podErr)
		}
		deleteToTheEnd(t, p, dir, v, base)
	})
	t.Run("read-only", func(t *testing.T) {
		p, dir := newPool(t)
		base := qgroups(t, p)
		v := create(t, p, "ro", 16*mib, nil)
		vfd, err := p.openVolume(v)
		if err != nil {
			t.Fatal(err)
		}
		var podErr error
		dirpooltest.AsPod(t, dirpooltest.ContainerCaps, func() { podErr = nestReadOnly(vfd) })
		err = unix.Mkdirat(vfd, "x", 0o755)
		unix.Close(vfd) // an open root keeps a destroyed subvolume from the cleaner
		if podErr != nil {
			t.Fatal(podErr)
		}
		if !errors.Is(err, unix.EROFS) {
			t.Fatalf("mkdir in the volume the pod made read-only: %v, want EROFS", err)
		}
		deleteToTheEnd(t, p, dir, v, base)
	})
}

// nestDeep makes, under the directory vfd, depth directories with names
// of n bytes, each opened beneath the last (no path is ever resolved
// whole), and at the bottom a subvolume holding another: a pod's call.
func nestDeep(vfd, depth, n int) error {
	fd, err := unix.Dup(vfd)
	if err != nil {
		return err
	}
	for i := range depth {
		name := fmt.Sprintf("%03d%s", i, strings.Repeat("d", n-3))
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			unix.Close(fd)
			return err
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	defer unix.Close(fd)
	if err := createSubvolume(fd, "inner"); err != nil {
		return err
	}
	inner, err := unix.Openat(fd, "inner", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(inner)
	return createSubvolume(inner, "innermost")
}

// nestReadOnly makes in the volume vfd a subvolume "ro" holding a
// subvolume and a read-only snapshot of the volume, then makes "ro" and
// the volume itself read-only: a pod's calls, all allowed to an owner.
func nestReadOnly(vfd int) error {
	if err := createSubvolume(vfd, "ro"); err != nil {
		return err
	}
	ro, err := unix.Openat(vfd, "ro", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ro)
	if err := createSubvolume(ro, "inner"); err != nil {
		return err
	}
	if err := snapshotSubvolume(vfd, ro, "snap", true); err != nil {
		return err
	}
	if err := setReadOnly(ro); err != nil {
		return err
	}
	return setReadOnly(vfd)
}

// Immutable and append-only flags (a privileged pod's chattr; a default
// one is refused) on the volume's root, on nested subvolumes' roots (one
// of them read-only), on the directories holding them and on files: the
// delete clears them and finishes (the rename into the trash failed EPERM
// before).
func TestDeleteFinishesThroughImmutableFlags(t *testing.T) {
	p, dir := newPool(t)
	base := qgroups(t, p)
	v := create(t, p, "flags", 16*mib, nil)
	root := filepath.Join(dir, v.Path)
	refusedToPod(t, root)
	must(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	nestSubvolume(t, dir, v, "a/b/sub")
	nestSubvolume(t, dir, v, "a/b/sub/inner")
	must(t, os.WriteFile(filepath.Join(root, "a/b/sub/inner/f"), []byte("x"), 0o644))
	chattr(t, filepath.Join(root, "a/b/sub/inner/f"), podImmutable)
	chattr(t, filepath.Join(root, "a/b/sub/inner"), podImmutable)
	chattr(t, filepath.Join(root, "a/b/sub"), podAppendOnly)
	// A read-only one with a flagged root: its flag cannot come off
	// until it is writable.
	nestSubvolume(t, dir, v, "a/b/frozen")
	chattr(t, filepath.Join(root, "a/b/frozen"), podImmutable)
	frozen, err := unix.Open(filepath.Join(root, "a/b/frozen"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = setReadOnly(frozen)
	unix.Close(frozen)
	if err != nil {
		t.Fatal(err)
	}
	chattr(t, filepath.Join(root, "a/b"), podImmutable)
	chattr(t, filepath.Join(root, "a"), podAppendOnly)
	chattr(t, root, podImmutable)
	deleteToTheEnd(t, p, dir, v, base)
}

// The same on a plain (ext4) pool, whose delete removes the tree entry
// by entry: flagged files, directories (one past the depth at which the
// removal moves a subtree to the top of the trash) and the volume's root.
func TestPlainDeleteFinishesThroughImmutableFlags(t *testing.T) {
	dir := dirpooltest.Filesystem(t, testutil.Scratch(t, "dirpool-ext4"), 512<<20, "ext4")
	p := openPool(t, dir)
	v := create(t, p, "flags", 8*mib, map[string]string{ParamAllowUnenforcedSize: "true"})
	root := filepath.Join(dir, v.Path)
	refusedToPod(t, root)
	var flagged []string
	for _, d := range []string{"i", "a"} {
		must(t, os.Mkdir(filepath.Join(root, d), 0o755))
		for _, f := range []string{"plain", "immutable", "append"} {
			must(t, os.WriteFile(filepath.Join(root, d, f), []byte("x"), 0o644))
		}
		flagged = append(flagged, filepath.Join(d, "immutable"), filepath.Join(d, "append"), d)
	}
	deep := root
	for i := range maxRemoveDepth + 8 {
		deep = filepath.Join(deep, "d")
		must(t, os.Mkdir(deep, 0o755))
		must(t, os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o644))
		if i >= maxRemoveDepth-4 {
			rel, _ := filepath.Rel(root, deep)
			flagged = append(flagged, filepath.Join(rel, "f"), rel)
		}
	}
	// Innermost first: a flagged directory takes no flag below it. The
	// files named append and the directory a get +a, the deep ones +i
	// and +a by turns, the rest +i.
	for i := len(flagged) - 1; i >= 0; i-- {
		flag := uint32(podImmutable)
		if filepath.Base(flagged[i]) == "append" || flagged[i] == "a" || i%4 == 0 {
			flag = podAppendOnly
		}
		chattr(t, filepath.Join(root, flagged[i]), flag)
	}
	chattr(t, root, podImmutable)
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatalf("empty the trash: %v", err)
	}
	assertClean(t, p, dir, 0)
}

// refusedToPod checks that a pod with a container's default capabilities
// cannot set the immutable flag (no CAP_LINUX_IMMUTABLE): the flagged
// cases are a privileged pod's.
func refusedToPod(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var podErr error
	dirpooltest.AsPod(t, dirpooltest.ContainerCaps, func() { podErr = setInodeFlags(fd, podImmutable) })
	if !errors.Is(podErr, unix.EPERM) {
		t.Fatalf("chattr +i by a default pod: %v, want EPERM", podErr)
	}
}
