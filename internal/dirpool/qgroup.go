package dirpool

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Quotas. A volume's size is a qgroup limit; which qgroup depends on the
// filesystem's quota mode:
//
//   - simple quotas (Linux 6.7+; what Open enables on a filesystem that
//     has none): each volume gets a level-1 qgroup 1/<its subvolume ID>
//     holding 0/<ID> and the limit. A subvolume a pod makes inside its
//     volume (btrfs lets any user where it can write) is put into that
//     qgroup by the kernel (simple quotas' auto-inherit: a new subvolume
//     joins the one level-1 group of the subvolume it is made in), so its
//     data counts against the claim: writes past the size get EDQUOT
//     there too.
//   - full qgroups (a filesystem that had them before the pool, or an
//     older kernel): the limit is on 0/<ID>. A nested subvolume's data
//     cannot be counted against the claim (the kernel does not inherit in
//     this mode), so the quota guard (guard.go) limits every nested
//     subvolume to 0 bytes: a pod may make one but not write into it.
//     NestedSubvolumesCounted says which case applies.
//
// Either way a pod can make a subvolume that the kernel puts in no group,
// or in another volume's (guard.go): the guard repairs that.
//
// Destroying a subvolume leaves its qgroups behind (full mode: 0/<ID>
// stays, "<stale>"; both modes: the level-1 group). The pool records
// every qgroup it owns that is due to go as an empty file
// .filevol/qgroups/<level>_<id>, durably, before the subvolume is
// destroyed; sweepQgroups destroys them once the kernel's cleaner has
// dropped the subvolume (before that the kernel answers EBUSY) and
// removes the file. Only qgroups named there are ever destroyed: the
// pool's filesystem may hold other users' qgroups.
const qgroupsDir = "qgroups"

// setUpQuota turns quotas on when they are off (simple quotas where the
// kernel has them, else full qgroups) and reports whether they are simple.
func (p *Pool) setUpQuota() (simple bool, err error) {
	base := "/sys/fs/btrfs/" + p.uuid + "/qgroups"
	if _, err := os.Stat(base); errors.Is(err, os.ErrNotExist) {
		err = enableQuota(p.root, quotaCtlSimple)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			err = enableQuota(p.root, quotaCtlEnable)
		}
		if err != nil {
			return false, err
		}
	}
	mode, err := os.ReadFile(base + "/mode")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	simple = strings.TrimSpace(string(mode)) == "squota"
	if !simple {
		klog.InfoS("Directory pool on full btrfs qgroups: a subvolume a pod makes inside its volume cannot count against the volume's size, so it is limited to 0 bytes (simple quotas count it)", "pool", p.dir)
	}
	return simple, nil
}

// limitVolume sets the limit of the new volume whose root fd is open
// (v.Subvolume known): in a level-1 group of its own on simple quotas.
func (q *btrfsQuota) limitVolume(fd int, v *Volume) error {
	if !q.simple {
		return limitQgroup(fd, 0, v.CapacityBytes)
	}
	g := qgroupID(1, v.Subvolume)
	if err := createQgroup(q.p.root, g, true); err != nil {
		return fmt.Errorf("btrfs qgroup create 1/%d: %w", v.Subvolume, err)
	}
	v.Group = v.Subvolume
	if err := assignQgroup(q.p.root, qgroupID(0, v.Subvolume), g, true); err != nil {
		return err
	}
	return limitQgroup(q.p.root, g, v.CapacityBytes)
}

// setLimit changes the limit of an existing volume, on the qgroup its
// record names (a volume keeps the mode it was made in).
func (q *btrfsQuota) setLimit(fd int, v Volume, bytes int64) error {
	if v.Group != 0 {
		return limitQgroup(q.p.root, qgroupID(1, v.Group), bytes)
	}
	return limitQgroup(fd, 0, bytes)
}

// usage reads the volume's qgroup.
func (q *btrfsQuota) usage(v Volume) (used, limit int64, err error) {
	if v.Group != 0 {
		return qgroupUsage(q.p.uuid, 1, v.Group)
	}
	return qgroupUsage(q.p.uuid, 0, v.Subvolume)
}

// destroyOne destroys the subvolume name in parent (which must hold no
// other subvolume) after recording its qgroups as due to go and lifting
// their limits: a subvolume at its limit cannot otherwise be destroyed
// (the kernel reserves space for the deletion against it: EDQUOT).
func (p *Pool) destroyOne(parent int, name string) error {
	fd, err := openBeneath(parent, name)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return err // never destroyed unrecorded: its qgroups would stay
	}
	if err == nil {
		id, ierr := subvolumeID(fd)
		root, rerr := isSubvolumeRoot(fd)
		_ = unix.Close(fd)
		if err := errors.Join(ierr, rerr); err != nil {
			return err // likewise: not destroyed before it is recorded
		}
		if root {
			if err := p.markQgroups(id); err != nil {
				return err
			}
			_ = limitQgroup(p.root, qgroupID(1, id), -1) // none: ENOENT
			_ = limitQgroup(p.root, qgroupID(0, id), -1)
		}
	}
	return destroySubvolume(parent, name)
}

// markQgroups records 0/id and 1/id as due to go, durably.
func (p *Pool) markQgroups(id uint64) error {
	dir, err := p.metaFD(qgroupsDir)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	for _, level := range []int{0, 1} {
		fd, err := unix.Openat(dir, fmt.Sprintf("%d_%d", level, id), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return fmt.Errorf("record qgroup %d/%d as due to go: %w", level, id, err)
		}
		_ = unix.Close(fd)
	}
	return unix.Fsync(dir)
}

// sweepQgroups destroys the qgroups recorded as due to go whose
// subvolumes the kernel has dropped, members (level 0) before groups
// (level 1). It returns how many are still waiting for the kernel's
// cleaner. A qgroup a live volume uses (its subvolume ID was reused after
// a remount) is never destroyed; its file goes.
func (p *Pool) sweepQgroups() (waiting int, err error) {
	names, err := p.entries(qgroupsDir)
	if err != nil {
		return 0, err
	}
	if len(names) == 0 {
		return 0, nil
	}
	live, err := p.liveQgroupIDs()
	if err != nil {
		// Which IDs are live is unknown: nothing is destroyed or
		// forgotten this pass; the files wait for the next.
		return len(names), err
	}
	type due struct {
		name      string
		level, id uint64
	}
	var all []due
	for _, n := range names {
		l, i, ok := strings.Cut(n, "_")
		level, lerr := strconv.ParseUint(l, 10, 8)
		id, ierr := strconv.ParseUint(i, 10, 48)
		if !ok || lerr != nil || ierr != nil || level > 1 {
			continue // not one of ours: left alone
		}
		all = append(all, due{n, level, id})
	}
	sort.Slice(all, func(a, b int) bool { return all[a].level < all[b].level })
	dir, err := p.metaFD(qgroupsDir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	var errs []error
	for _, d := range all {
		if !live[d.id] {
			err := createQgroup(p.root, qgroupID(d.level, d.id), false)
			if errors.Is(err, unix.EBUSY) {
				waiting++
				continue
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("btrfs qgroup destroy %d/%d: %w", d.level, d.id, err))
				continue
			}
		}
		if err := unix.Unlinkat(dir, d.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return waiting, errors.Join(errs...)
}

// liveQgroupIDs returns the subvolume and group IDs of the volumes whose
// subvolume is in place at their path. A record alone does not make an ID
// live: a delete renames the subvolume into the trash before it removes
// the record, and a collector pass between the two (a concurrent one, or
// the next open's after a kill there) destroys that subvolume and records
// its qgroups as due to go while the record still names them; counting
// the record would drop the files and leave the qgroups for good. Called
// after the due files are listed: a file is written only once its
// subvolume has left its path, and a subvolume ID is not reused within a
// mount, so a volume found in place here is one that reuses the ID.
func (p *Pool) liveQgroupIDs() (map[uint64]bool, error) {
	live := map[uint64]bool{}
	for _, v := range p.vols.List() {
		if v.Unenforced {
			continue // plain: no qgroups
		}
		fd, err := p.openVolume(v)
		if notInPlace(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("is volume %s in place: %w", v.ID, err)
		}
		_ = unix.Close(fd)
		live[v.Subvolume] = true
		if v.Group != 0 {
			live[v.Group] = true
		}
	}
	return live, nil
}

// notInPlace reports whether openVolume's error says the volume's
// subvolume is not at its path (gone, or something else is there), as
// opposed to not knowing (out of descriptors, an I/O error).
func notInPlace(err error) bool {
	for _, e := range []error{unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.EXDEV, ErrNotVolume} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
