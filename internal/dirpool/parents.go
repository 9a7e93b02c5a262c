package dirpool

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Parent directories. A volume's path may have directories above it
// (basePath, a subPathPattern of several segments). Those a create makes
// are marked as the pool's, with the extended attribute madeXattr set to
// the pool's ID (a trusted.* attribute: only CAP_SYS_ADMIN reads or
// writes one, and no pod reaches the pool's own subvolume anyway); the
// delete that leaves them empty removes them, innermost first, up to the
// first that is not the pool's or not empty: the pool's root and an
// operator's directory always stay. Without this a pattern of 300
// segments left 299 empty directories behind each delete. A create that
// meets one removed under it (ENOENT: a directory removed while open
// takes no new entry) makes them again.
const madeXattr = "trusted.filevol.made"

// parentAttempts bounds how many times a create makes its parents again
// after a delete removed one under it.
const parentAttempts = 10

// makeParents makes the directories above rel, each beneath the last and
// in the pool's own subvolume (never inside a volume), and returns the
// last one open with the name rel has in it.
func (p *Pool) makeParents(rel string) (fd int, last string, err error) {
	for range parentAttempts {
		fd, last, err = p.makeParentsOnce(rel)
		if !errors.Is(err, unix.ENOENT) {
			break
		}
		klog.V(4).InfoS("A delete removed a parent of a volume being created; making it again", "pool", p.dir, "path", rel)
	}
	return fd, last, err
}

func (p *Pool) makeParentsOnce(rel string) (int, string, error) {
	comps := strings.Split(rel, "/")
	fd, err := unix.Dup(p.root)
	if err != nil {
		return -1, "", err
	}
	for _, c := range comps[:len(comps)-1] {
		err := unix.Mkdirat(fd, c, 0o755)
		made := err == nil
		if err != nil && !errors.Is(err, unix.EEXIST) {
			_ = unix.Close(fd)
			return -1, "", fmt.Errorf("make directory %s of %s: %w", c, rel, err)
		}
		next, err := openBeneath(fd, c)
		_ = unix.Close(fd)
		if errors.Is(err, unix.ENOENT) {
			return -1, "", fmt.Errorf("open directory %s of %s: %w", c, rel, err) // removed meanwhile
		}
		if err != nil {
			return -1, "", fmt.Errorf("%w: %s of %s: %v", ErrInvalidPath, c, rel, err)
		}
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd)
			return -1, "", err
		}
		if st.Dev != p.rootDev {
			_ = unix.Close(fd)
			return -1, "", fmt.Errorf("%w: %s of %s is inside another subvolume (a volume): volumes are never nested", ErrInvalidPath, c, rel)
		}
		if made {
			if err := unix.Fsetxattr(fd, madeXattr, []byte(p.id), 0); err != nil {
				// Unmarked, it only stays after the deletes (a filesystem
				// without trusted.* attributes).
				klog.V(2).InfoS("Cannot mark a directory as the pool's; it stays after its volumes are deleted", "pool", p.dir, "path", rel, "dir", c, "err", err)
			}
		}
	}
	return fd, comps[len(comps)-1], nil
}

// placeAt renames name in from to rel, never over anything, through
// rel's parent directory dir that makeParents returned. When a delete
// removed a parent meanwhile (ENOENT), the parents are made again.
func (p *Pool) placeAt(from int, name string, dir int, rel string) error {
	_, last := path.Split(rel)
	err := renameDirNoReplace(from, name, dir, last)
	for i := 0; errors.Is(err, unix.ENOENT) && i < parentAttempts; i++ {
		klog.V(4).InfoS("A delete removed the parent of a volume being placed; making it again", "pool", p.dir, "path", rel)
		d, _, merr := p.makeParents(rel)
		if merr != nil {
			return merr
		}
		err = renameDirNoReplace(from, name, d, last)
		_ = unix.Close(d)
	}
	return err
}

// removeParents removes the directories above rel that a create made and
// that are empty, innermost first, up to the first that is not the
// pool's or not empty. Best effort: what it leaves is an empty
// directory, and the next delete under it tries again.
func (p *Pool) removeParents(rel string) {
	comps := strings.Split(rel, "/")
	comps = comps[:len(comps)-1]
	fds := []int{p.root}
	defer func() {
		for _, fd := range fds[1:] {
			_ = unix.Close(fd)
		}
	}()
	for _, c := range comps {
		fd, err := openBeneath(fds[len(fds)-1], c)
		if err != nil {
			break // gone (another delete's removal) or not a directory
		}
		fds = append(fds, fd)
	}
	for i := len(fds) - 1; i >= 1; i-- {
		if !p.madeHere(fds[i]) {
			return
		}
		err := unix.Unlinkat(fds[i-1], comps[i-1], unix.AT_REMOVEDIR)
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			klog.ErrorS(err, "Removing an empty directory a create made", "pool", p.dir, "path", strings.Join(comps[:i], "/"))
			return
		}
	}
}

// madeHere reports whether the directory fd is one a create of this pool
// made: in the pool's own subvolume, marked with the pool's ID.
func (p *Pool) madeHere(fd int) bool {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != p.rootDev {
		return false
	}
	buf := make([]byte, 64)
	n, err := unix.Fgetxattr(fd, madeXattr, buf)
	return err == nil && string(buf[:n]) == p.id
}
