package dirpool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/sparse"
	"github.com/filevol/filevol/internal/volume"
)

// A restore or clone where the pool has no writable snapshot (CephFS:
// no reflink, FICLONE is EOPNOTSUPP) is a copy of the snapshot's tree
// into the new volume's directory, whose quota is set first. What it
// keeps: the tree (directories, files, symlinks, fifos, device nodes;
// not sockets, which are a process's), owners, modes (set-id bits
// included), timestamps, the extended attributes a pod or the system
// sets (user., trusted., security., system.posix_acl_*; not ceph.*, the
// filesystem's own, which a copy must not carry: a quota of a subdirectory
// would come along), hard links (one inode, several names, as in the
// source), and holes (SEEK_DATA/SEEK_HOLE; data moves with
// copy_file_range, on CephFS inside the OSDs). Every entry is opened
// beneath its directory without following a link: a tree a pod made
// cannot lead the copy out of it.
//
// The bytes a CephFS quota counts are the files' sizes (ceph.dir.rbytes),
// so the copy counts them and stops with volume.ErrInvalidArgument as
// soon as they pass the volume's size, before the quota (which a client
// learns of lazily) would.
type treeCopy struct {
	limit, bytes, files int64
	// links maps a source inode with more than one name to the path of
	// its first copy, relative to the destination's root.
	links map[uint64]string
	root  int // the destination's root
}

// maxCopyDepth bounds the directories a copy holds open at once: a pod
// can make a tree of any depth, and two descriptors per level is the cost.
const maxCopyDepth = 512

// copyTree copies the tree under src into the empty directory dst (both
// open), then gives dst src's attributes, except its owner and mode,
// which are the new volume's. It returns the bytes and files copied.
func copyTree(src, dst int, limit int64) (bytes, files int64, err error) {
	c := &treeCopy{limit: limit, links: map[uint64]string{}, root: dst}
	if err := c.dir(src, dst, "", 0); err != nil {
		return c.bytes, c.files, err
	}
	if err := copyXattrs(src, dst); err != nil {
		return c.bytes, c.files, err
	}
	return c.bytes, c.files, copyTimes(src, dst, "", nil)
}

// dir copies the entries of src into dst; rel is dst's path from the root.
func (c *treeCopy) dir(src, dst int, rel string, depth int) error {
	if depth >= maxCopyDepth {
		return fmt.Errorf("%w: the source tree is deeper than %d directories at %s", volume.ErrInvalidArgument, maxCopyDepth, rel)
	}
	names, err := dirNames(src)
	if err != nil {
		return fmt.Errorf("list %s: %w", rel, err)
	}
	for _, n := range names {
		if err := c.entry(src, dst, n, rel+"/"+n, depth); err != nil {
			return err
		}
	}
	return nil
}

func (c *treeCopy) entry(src, dst int, name, rel string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		if first, ok := c.links[st.Ino]; ok {
			if err := unix.Linkat(c.root, strings.TrimPrefix(first, "/"), dst, name, 0); err != nil {
				return fmt.Errorf("link %s to %s: %w", rel, first, err)
			}
			return nil
		}
		c.links[st.Ino] = rel
	}
	c.files++
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return c.subdir(src, dst, name, rel, &st, depth)
	case unix.S_IFREG:
		if err := c.file(src, dst, name, rel, &st); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := readlinkat(src, name)
		if err == nil {
			err = unix.Symlinkat(target, dst, name)
		}
		if err != nil {
			return fmt.Errorf("copy symlink %s: %w", rel, err)
		}
	case unix.S_IFIFO, unix.S_IFCHR, unix.S_IFBLK:
		if err := unix.Mknodat(dst, name, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("copy special file %s: %w", rel, err)
		}
	default:
		c.files--
		return nil // a socket: its process is not copied with it
	}
	return c.attrs(dst, name, rel, &st)
}

func (c *treeCopy) subdir(src, dst int, name, rel string, st *unix.Stat_t, depth int) error {
	if err := unix.Mkdirat(dst, name, 0o700); err != nil {
		return fmt.Errorf("make directory %s: %w", rel, err)
	}
	sfd, err := openBeneath(src, name)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd, err := openBeneath(dst, name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := c.dir(sfd, dfd, rel, depth+1); err != nil {
		return err
	}
	if err := copyXattrs(sfd, dfd); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	// Owner and mode after the entries (a directory of mode 0500 still
	// takes them), times last (each entry made changed them).
	return c.attrs(dst, name, rel, st)
}

func (c *treeCopy) file(src, dst int, name, rel string, st *unix.Stat_t) error {
	if c.bytes += st.Size; c.bytes > c.limit {
		return fmt.Errorf("%w: the source holds more than the volume's %d bytes (at %s); ask for a larger volume", volume.ErrInvalidArgument, c.limit, rel)
	}
	sfd, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	defer unix.Close(sfd)
	dfd, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	defer unix.Close(dfd)
	// Not under the request's deadline: a restore runs to its end, and a
	// retried CreateVolume waits for it (ABORTED meanwhile).
	if err := sparse.Copy(context.Background(), sfd, dfd, st.Size); err != nil {
		if errors.Is(err, unix.EDQUOT) {
			return fmt.Errorf("%w: the volume's quota of %d bytes refused the copy at %s; ask for a larger volume", volume.ErrInvalidArgument, c.limit, rel)
		}
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	return copyXattrs(sfd, dfd)
}

// attrs gives the copy of name in dst the source's owner, mode and times.
func (c *treeCopy) attrs(dst int, name, rel string, st *unix.Stat_t) error {
	if err := unix.Fchownat(dst, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		// After the chown, which clears the set-id bits.
		if err := unix.Fchmodat(dst, name, st.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("chmod %s: %w", rel, err)
		}
	}
	return copyTimes(-1, dst, name, st)
}

// copyTimes sets the access and modification times of name in dst (of
// dst itself when name is "") from st, or from src when st is nil.
func copyTimes(src, dst int, name string, st *unix.Stat_t) error {
	if st == nil {
		st = &unix.Stat_t{}
		if err := unix.Fstat(src, st); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if name == "" {
		return unix.UtimesNanoAt(dst, "", ts, unix.AT_EMPTY_PATH)
	}
	if err := unix.UtimesNanoAt(dst, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set the times of %s: %w", name, err)
	}
	return nil
}

func readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// copiedXattr reports whether a copy carries the attribute.
func copiedXattr(name string) bool {
	for _, p := range []string{"user.", "trusted.", "security.", "system.posix_acl_"} {
		if strings.HasPrefix(name, p) {
			return !strings.HasPrefix(name, "trusted.filevol.")
		}
	}
	return false
}

// copyXattrs copies the extended attributes copiedXattr keeps from the
// open src to the open dst.
func copyXattrs(src, dst int) error {
	list, err := xattrList(src)
	if err != nil {
		return err
	}
	for _, name := range list {
		if !copiedXattr(name) {
			continue
		}
		val, err := xattrValue(src, name)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err == nil {
			err = unix.Fsetxattr(dst, name, val, 0)
		}
		if err != nil {
			return fmt.Errorf("copy extended attribute %s: %w", name, err)
		}
	}
	return nil
}

func xattrList(fd int) ([]string, error) {
	n, err := unix.Flistxattr(fd, nil)
	if err != nil || n == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		return nil, err
	}
	buf := make([]byte, n)
	if n, err = unix.Flistxattr(fd, buf); err != nil {
		return nil, err
	}
	return strings.FieldsFunc(string(buf[:n]), func(r rune) bool { return r == 0 }), nil
}

func xattrValue(fd int, name string) ([]byte, error) {
	n, err := unix.Fgetxattr(fd, name, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	n, err = unix.Fgetxattr(fd, name, buf)
	return buf[:n], err
}
