package dirpool

import "golang.org/x/sys/unix"

// quota is how a pool holds its volumes to their sizes, and so what a
// volume is on its filesystem: the limit needs something to hang on (a
// btrfs subvolume for a qgroup, a directory for an attribute), and that
// thing decides how a volume is made, recognised and destroyed. There is
// one implementation per kind of filesystem:
//
//   - btrfsQuota (quota_btrfs.go, qgroup.go): a subvolume per volume
//     with a qgroup limit, on full qgroups or simple quotas;
//   - cephQuota (quota_ceph.go): a directory with a CephFS quota
//     attribute, on a ceph-fuse mount;
//   - noQuota (plain.go): a plain directory whose size is not enforced,
//     on any other filesystem.
//
// Open chooses one from the pool's filesystem (openQuota) and keeps it
// for the pool's life; the create, expand, delete, snapshot and guard
// paths ask it rather than looking at the filesystem again. Another way
// of enforcing a size is one more type and one more case in openQuota.
// Every method may be called concurrently.
type quota interface {
	// mode names how sizes are enforced, for people (Pool.QuotaMode).
	mode() string
	// nestedCounted reports whether what a pod makes inside its volume
	// (btrfs: a subvolume of its own) counts against the volume's size.
	nestedCounted() bool
	// guarded reports whether a pod can take data out of its volume's
	// limit, so that the quota guard (guard.go) must run.
	guarded() bool

	// checkCreate refuses a create this pool cannot give as asked; clone
	// is set for a volume made from a snapshot or another volume.
	checkCreate(params Params, rel string, clone bool) error
	// checkSnapshot refuses a snapshot this pool cannot take.
	checkSnapshot() error
	// makeVolume makes tmp/<v.ID>, empty or a copy of v.ContentSource,
	// with v's limit, owner and mode, and fills in the fields of v that
	// identify it and say how its size is held.
	makeVolume(tmp int, v *Volume) error
	// isVolume checks that fd, opened at v.Path, is v's own directory and
	// not one put in its place (ErrNotVolume).
	isVolume(fd int, v Volume) error
	// setLimit changes the limit of v, whose root fd is open.
	setLimit(fd int, v Volume, bytes int64) error
	// usage is v's bytes and its limit, as the kernel last counted them.
	usage(v Volume) (used, limit int64, err error)
	// release lifts the limit of v, whose root fd is open, for a
	// directory kept past its delete (retain.go).
	release(fd int, v Volume) error

	// readyToMove clears what a pod protected its volume's root fd with,
	// so that the delete can rename it into the trash.
	readyToMove(fd int) error
	// destroy destroys name in parent with everything in it, whatever
	// a pod made or protected there; nothing there is success.
	destroy(parent int, name string) error
	// destroyTrashed destroys the trash's entry name; aside is the
	// pool's destroyingDir, for a destroy that must not hold the trash.
	destroyTrashed(trash, aside int, name string) error
}

// openQuota chooses the pool's quota from its filesystem's type and
// readies it (on btrfs, quotas are enabled if they are off), and the
// snapshotter that goes with it: btrfs subvolumes or CephFS snapshots.
func openQuota(p *Pool, magic int64) (quota, snapshotter, error) {
	if magic == unix.FUSE_SUPER_MAGIC && isCephFS(p.root) {
		s, err := openCephSnaps(p)
		if err != nil {
			return nil, nil, err
		}
		return openCephQuota(p), s, nil
	}
	s, err := openSubvolumeSnaps(p)
	if err != nil {
		return nil, nil, err
	}
	if magic == unix.BTRFS_SUPER_MAGIC {
		q, err := openBtrfsQuota(p)
		if err != nil {
			return nil, nil, err // not a quota holding a nil pointer
		}
		return q, s, nil
	}
	return openNoQuota(p, magic), s, nil
}

// NestedSubvolumesCounted reports whether data in a subvolume a pod made
// inside its volume counts against the volume's size (simple quotas).
func (p *Pool) NestedSubvolumesCounted() bool { return p.quota.nestedCounted() }

// QuotaMode names how the pool enforces sizes, for doctor and logs.
func (p *Pool) QuotaMode() string { return p.quota.mode() }
