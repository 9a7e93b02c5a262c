package dirpool

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// btrfsQuota is the quota of a pool on btrfs: a volume is a subvolume,
// recognised by its ID, and its size a qgroup limit (qgroup.go says which
// qgroup in which mode). A pod can make subvolumes inside its volume and
// choose their qgroups, so the guard runs (guard.go); what a pod nested
// or protected is destroyed with the volume (nested.go, protect_linux.go).
type btrfsQuota struct {
	p *Pool
	// simple: the filesystem is on simple quotas, so a volume's limit is
	// on a level-1 qgroup of its own that its nested subvolumes join; else
	// full qgroups, the limit on the subvolume's own 0/<ID>.
	simple bool
}

// openBtrfsQuota reads the filesystem's UUID (sysfs names its qgroups by
// it) and enables quotas if they are off.
func openBtrfsQuota(p *Pool) (*btrfsQuota, error) {
	var err error
	if p.uuid, err = fsUUID(p.root); err != nil {
		return nil, err
	}
	simple, err := p.setUpQuota()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotBtrfs, p.dir, err)
	}
	return &btrfsQuota{p: p, simple: simple}, nil
}

func (q *btrfsQuota) mode() string {
	if q.simple {
		return "btrfs simple quotas (squota): nested subvolumes count against the volume"
	}
	return "btrfs qgroups: nested subvolumes a pod makes cannot count against the volume and are limited to 0 bytes"
}

func (q *btrfsQuota) nestedCounted() bool { return q.simple }

func (q *btrfsQuota) guarded() bool { return true }

// checkCreate: btrfs gives every create, clones included (writable
// snapshots).
func (q *btrfsQuota) checkCreate(Params, string, bool) error { return nil }

func (q *btrfsQuota) checkSnapshot() error { return nil }

// makeVolume makes tmp/<id> a subvolume, empty or a writable snapshot of
// the source, with its qgroup limit, owner and mode.
func (q *btrfsQuota) makeVolume(tmp int, v *Volume) error {
	if src := v.ContentSource; src != nil {
		sfd, err := q.p.openSource(src)
		if err != nil {
			return err
		}
		err = snapshotSubvolume(sfd, tmp, v.ID, false)
		_ = unix.Close(sfd)
		if err != nil {
			return err
		}
	} else if err := createSubvolume(tmp, v.ID); err != nil {
		return err
	}
	fd, err := openBeneath(tmp, v.ID)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if v.Subvolume, err = subvolumeID(fd); err != nil {
		return err
	}
	if err := q.limitVolume(fd, v); err != nil {
		return err
	}
	return ownVolume(fd, *v)
}

// isVolume checks that fd is the root of the volume's subvolume.
func (q *btrfsQuota) isVolume(fd int, v Volume) error {
	root, err := isSubvolumeRoot(fd)
	if err != nil {
		return err
	}
	id, err := subvolumeID(fd)
	if err != nil {
		return err
	}
	if !root || id != v.Subvolume {
		return fmt.Errorf("%w: %s holds subvolume %d (a subvolume's root: %t), volume %s is subvolume %d",
			ErrNotVolume, v.Path, id, root, v.ID, v.Subvolume)
	}
	return nil
}

// release lifts the volume's limit and, on simple quotas, takes the
// subvolume out of its level-1 group and destroys the group: a kept
// directory counts against nothing.
func (q *btrfsQuota) release(fd int, v Volume) error {
	if err := limitQgroup(fd, 0, -1); err != nil {
		return err
	}
	if v.Group == 0 {
		return nil
	}
	g := qgroupID(1, v.Group)
	if err := assignQgroup(q.p.root, qgroupID(0, v.Subvolume), g, false); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := createQgroup(q.p.root, g, false); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("btrfs qgroup destroy 1/%d: %w", v.Group, err)
	}
	return nil
}

// readyToMove makes the volume's subvolume writable as well: a read-only
// one cannot be renamed (its ".." changes).
func (q *btrfsQuota) readyToMove(fd int) error { return unprotectRoot(fd, true, true) }

// destroy destroys the subvolume name in parent with the subvolumes a
// pod may have made inside it and whatever the pod protected
// (destroyNested). A plain directory (never made by the pool, but
// possible after an operator's move) is left for the operator and
// reported.
func (q *btrfsQuota) destroy(parent int, name string) error {
	return q.p.destroyNested(parent, name)
}

// destroyTrashed moves the trash's entry name to a directory of its own
// (aside, destroyingDir) before destroying it: the kernel holds the lock
// of a subvolume's parent directory while it destroys the subvolume,
// which takes seconds for a tree of a million files (1.1 s for 300,000
// measured, a rename into that directory waiting 0.9 s of it), and every
// delete meanwhile renames a volume into the trash: a DeleteVolume waited
// 5 s behind a million-file tree's destroy until this (make
// bench-tree-delete).
func (q *btrfsQuota) destroyTrashed(trash, aside int, name string) error {
	err := unix.Renameat2(trash, name, aside, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) {
		// Protected again after the delete moved it (a pod that still
		// had it mounted): unprotected, as the delete did.
		if uerr := unprotectAt(trash, name); uerr != nil {
			return errors.Join(err, uerr)
		}
		err = unix.Renameat2(trash, name, aside, name, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("move %s out of the trash to destroy it: %w", name, err)
	}
	return q.destroy(aside, name)
}

// unprotectAt unprotects the volume's root name in dir (unprotectRoot):
// made writable too if it is a subvolume's root.
func unprotectAt(dir int, name string) error {
	fd, err := openBeneath(dir, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	root, err := isSubvolumeRoot(fd)
	if err != nil {
		return err
	}
	return unprotectRoot(fd, root, true)
}
