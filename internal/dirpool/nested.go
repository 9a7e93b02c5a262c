package dirpool

import (
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

// destroyNested destroys the subvolume name in parent with every
// subvolume a pod made inside it (btrfs lets any user make one where it
// can write; the kernel refuses to destroy a subvolume that holds one,
// ENOTEMPTY). Which subvolumes are inside, and where, comes from btrfs's
// root tree (subvolumeRefs), and each one's directory is opened by file
// handle (openByHandle): no directory of the pod's is walked or resolved
// by path, so no depth (past PATH_MAX), width or rename of the pod's
// stops it. What the pod protected is unprotected first
// (protect_linux.go): the immutable and append-only flags come off the
// subvolume roots and the directories holding them, and the subvolumes
// that hold others, the volume included, are made writable. The
// innermost go first.
func (p *Pool) destroyNested(parent int, name string) error {
	fd, err := openBeneath(parent, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	root, rerr := isSubvolumeRoot(fd)
	id, ierr := subvolumeID(fd)
	err = errors.Join(rerr, ierr)
	if err == nil && root {
		// The flags forbid destroying it (EPERM).
		err = unprotectRoot(fd, true, false)
	}
	_ = unix.Close(fd)
	if err != nil {
		return fmt.Errorf("ready %s to be destroyed: %w", name, err)
	}
	// Not a subvolume: destroyOne reports it, leaving it for the operator.
	// One that holds none goes at once, as most do; the first try also
	// lifts its limit, which its nested ones count against (a full
	// volume's cannot be destroyed under it: EDQUOT). A pod still at work
	// may make another meanwhile: look again, a bounded number of times.
	err = p.destroyOne(parent, name)
	for i := 0; root && errors.Is(err, unix.ENOTEMPTY) && i < destroyAttempts; i++ {
		if ierr := p.destroyInside(id); ierr != nil {
			return errors.Join(err, ierr)
		}
		err = p.destroyOne(parent, name)
	}
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// destroyAttempts bounds destroyNested's passes over one subvolume.
const destroyAttempts = 5

// destroyInside destroys every subvolume under subvolume top, innermost
// first.
func (p *Pool) destroyInside(top uint64) error {
	refs, err := subvolumeRefs(p.root)
	if err != nil {
		return err
	}
	inside := nestedIn(refs, top)
	// Every one unprotected before any is destroyed: a subvolume's entry
	// is unlinked from its parent, which must be writable (a subvolume
	// that holds none may stay read-only: making it writable commits a
	// transaction), and its root must not be flagged.
	holds := map[uint64]bool{}
	for _, r := range inside {
		holds[r.parent] = true
	}
	if err := p.unprotectSubvolume(top, true); err != nil {
		return err
	}
	for _, r := range inside {
		if err := p.unprotectSubvolume(r.id, holds[r.id]); err != nil {
			return err
		}
	}
	for _, r := range inside {
		if err := p.destroyRef(r); err != nil {
			return err
		}
	}
	return nil
}

// nestedIn returns the subvolumes under top (transitively), the deepest
// in the parent chain first, so that each goes before the one holding it.
func nestedIn(refs []subvolRef, top uint64) []subvolRef {
	parentOf := make(map[uint64]uint64, len(refs))
	for _, r := range refs {
		parentOf[r.id] = r.parent
	}
	// depth of id below top; 0: not under it. The chain is bounded by
	// the number of subvolumes, should the tree ever hold a loop.
	depth := func(id uint64) int {
		for d := 1; d <= len(refs); d++ {
			up, ok := parentOf[id]
			if !ok {
				return 0
			}
			if up == top {
				return d
			}
			id = up
		}
		return 0
	}
	type placed struct {
		subvolRef
		depth int
	}
	var in []placed
	for _, r := range refs {
		if d := depth(r.id); d > 0 {
			in = append(in, placed{r, d})
		}
	}
	sort.SliceStable(in, func(a, b int) bool { return in[a].depth > in[b].depth })
	out := make([]subvolRef, len(in))
	for i, r := range in {
		out[i] = r.subvolRef
	}
	return out
}

// unprotectSubvolume clears the flags of subvolume id's root, reached by
// handle, and makes the subvolume writable if it holds others.
func (p *Pool) unprotectSubvolume(id uint64, holds bool) error {
	fd, err := openByHandle(p.root, id, firstFreeObjectID)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE) {
		return nil // destroyed meanwhile
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unprotectRoot(fd, true, holds); err != nil {
		return fmt.Errorf("unprotect subvolume %d: %w", id, err)
	}
	return nil
}

// destroyRef destroys the subvolume r places, through its directory
// opened by handle (its flags cleared: they forbid unlinking from it).
func (p *Pool) destroyRef(r subvolRef) error {
	dir, err := openByHandle(p.root, r.parent, r.dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE) {
		return nil // gone with its directory meanwhile
	}
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if err := clearProtection(dir); err != nil {
		return fmt.Errorf("unprotect the directory holding subvolume %d: %w", r.id, err)
	}
	if err := p.destroyOne(dir, r.name); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("subvolume %d inside the volume: %w", r.id, err)
	}
	return nil
}
