package dirpool

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// The quota guard. Any process that can write in a directory of btrfs may
// make a subvolume there, and the kernel lets it choose the new
// subvolume's qgroups (BTRFS_IOC_SUBVOL_CREATE_V2 or SNAP_CREATE_V2 with
// BTRFS_SUBVOL_QGROUP_INHERIT): an empty list leaves it in no group, so a
// pod's writes there count against no limit; a list naming another
// volume's level-1 group charges that volume instead. No capability check
// and no mount option stops it (Linux 6.18). So the pool repairs: every
// interval the guard reads where each subvolume sits (the root tree,
// never the pod's directories) and which groups hold it (the quota
// tree), and puts each subvolume found inside a volume into that
// volume's group and out of every other. On simple quotas the member's
// usage moves with it, so what the pod wrote counts against its own
// volume at once. On full qgroups a member's usage cannot be counted
// against its volume, so the nested subvolume's own qgroup is limited to
// nothing instead. What the pod can write between its call and the next
// pass is the window (docs/security.md has the figures).

// DefaultGuardInterval is how often the guard looks, unless Options says.
const DefaultGuardInterval = 500 * time.Millisecond

// guardKept bounds the repairs remembered per volume (the latest win).
const guardKept = 4

// Repair is one thing the guard did to a subvolume a pod made.
type Repair struct {
	Subvolume uint64
	Path      string // inside the volume
	Did       string
	At        time.Time
}

// runGuard repairs every interval until the pool closes.
func (p *Pool) runGuard(interval time.Duration) {
	defer close(p.guardDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			if err := p.GuardPass(); err != nil {
				klog.ErrorS(err, "Quota guard pass", "pool", p.dir)
			}
		}
	}
}

// GuardPass confines every subvolume nested in a volume to that volume's
// quota, once. The background guard calls it; so may a test.
func (p *Pool) GuardPass() error {
	if !p.quota.guarded() {
		return nil
	}
	if c, ok := p.quota.(*cephQuota); ok {
		return c.guard() // no subvolumes: the quota attribute itself
	}
	refs, err := subvolumeRefs(p.root)
	if err != nil {
		return err
	}
	groups, err := qgroupParents(p.root)
	if err != nil {
		return err
	}
	vols := map[uint64]Volume{}
	for _, v := range p.vols.List() {
		if !v.Unenforced && v.Subvolume != 0 {
			vols[v.Subvolume] = v
		}
	}
	byID := map[uint64]subvolRef{}
	for _, r := range refs {
		byID[r.id] = r
	}
	var errs []error
	repaired := false
	for _, r := range refs {
		v, ok := volumeHolding(r.parent, byID, vols)
		if !ok {
			continue
		}
		did, err := p.confine(r.id, v, groups[r.id])
		errs = append(errs, err)
		if len(did) == 0 {
			continue
		}
		repaired = true
		rep := Repair{Subvolume: r.id, Path: p.pathInVolume(r, byID, v), Did: strings.Join(did, "; "), At: time.Now()}
		klog.InfoS("A subvolume made inside a directory volume was outside its quota: repaired", "pool", p.dir,
			"volumeID", v.ID, "subvolume", rep.Subvolume, "path", rep.Path, "did", rep.Did)
		p.remember(v.ID, rep)
	}
	if repaired {
		// Data still in the page cache was reserved against the old
		// groups only: commit it so that the next write is judged by the
		// volume's limit, not after writeback.
		errs = append(errs, unix.Syncfs(p.root))
	}
	p.forgetAllBut(vols)
	return errors.Join(errs...)
}

// volumeHolding finds the volume whose subvolume is id or holds it.
func volumeHolding(id uint64, byID map[uint64]subvolRef, vols map[uint64]Volume) (Volume, bool) {
	for range len(byID) + 1 { // bounded: the tree has no cycles, but never trust that
		if v, ok := vols[id]; ok {
			return v, true
		}
		r, ok := byID[id]
		if !ok {
			return Volume{}, false
		}
		id = r.parent
	}
	return Volume{}, false
}

// confine makes subvolume id count against volume v only, and says what
// it changed (nothing when it already did).
func (p *Pool) confine(id uint64, v Volume, groups []uint64) ([]string, error) {
	var did []string
	var errs []error
	member := qgroupID(0, id)
	want := uint64(0)
	if v.Group != 0 {
		want = qgroupID(1, v.Group)
	}
	has := false
	for _, g := range groups {
		if g == want {
			has = true
			continue
		}
		err := assignQgroup(p.root, member, g, false)
		if errors.Is(err, unix.ENOENT) {
			continue // another guard (a shared pool's other process) was first
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("take subvolume %d out of qgroup %s: %w", id, qgroupString(g), err))
			continue
		}
		did = append(did, "taken out of qgroup "+qgroupString(g)+p.whoseGroup(g))
	}
	switch {
	case want != 0 && !has:
		err := assignQgroup(p.root, member, want, true)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("put subvolume %d into its volume's qgroup %s: %w", id, qgroupString(want), err))
		} else if err == nil {
			did = append(did, "put into its volume's qgroup "+qgroupString(want))
		}
	case want == 0:
		if shut, err := limitedToNothing(p.uuid, id); err == nil && shut {
			break
		}
		if err := limitQgroup(p.root, member, 0); err != nil {
			errs = append(errs, fmt.Errorf("limit the nested subvolume %d: %w", id, err))
		} else {
			did = append(did, "limited to 0 bytes (on full qgroups a nested subvolume cannot count against its volume)")
		}
	}
	return did, errors.Join(errs...)
}

func qgroupString(g uint64) string {
	return fmt.Sprintf("%d/%d", g>>qgroupLevelShift, g&(1<<qgroupLevelShift-1))
}

// whoseGroup names the volume whose level-1 group g is, for the log.
func (p *Pool) whoseGroup(g uint64) string {
	if g>>qgroupLevelShift != 1 {
		return ""
	}
	for _, v := range p.vols.List() {
		if v.Group == g&(1<<qgroupLevelShift-1) {
			return " (volume " + v.ID + "'s)"
		}
	}
	return ""
}

// pathInVolume names where subvolume r sits inside volume v, for people:
// best effort, "subvolume N" when the kernel cannot say.
func (p *Pool) pathInVolume(r subvolRef, byID map[uint64]subvolRef, v Volume) string {
	id := r.id
	names := []string{}
	for range len(byID) + 1 {
		dir, err := inoPath(p.root, r.parent, r.dir)
		if err != nil {
			return fmt.Sprintf("subvolume %d", id)
		}
		names = append([]string{dir + r.name}, names...)
		if r.parent == v.Subvolume {
			return strings.Join(names, "/")
		}
		up, ok := byID[r.parent]
		if !ok {
			break
		}
		r = up
	}
	return fmt.Sprintf("subvolume %d", id)
}

// remember keeps rep among the volume's latest repairs.
func (p *Pool) remember(id string, rep Repair) {
	p.guardMu.Lock()
	defer p.guardMu.Unlock()
	r := append(p.repairs[id], rep)
	if len(r) > guardKept {
		r = r[len(r)-guardKept:]
	}
	p.repairs[id] = r
	p.repairCount[id]++
}

// forgetAllBut drops what is remembered of volumes that are gone.
func (p *Pool) forgetAllBut(vols map[uint64]Volume) {
	live := map[string]bool{}
	for _, v := range vols {
		live[v.ID] = true
	}
	p.guardMu.Lock()
	defer p.guardMu.Unlock()
	for id := range p.repairs {
		if !live[id] {
			delete(p.repairs, id)
			delete(p.repairCount, id)
		}
	}
}

// Repairs returns the latest repairs the guard made in the volume, and
// how many it made since the pool was opened.
func (p *Pool) Repairs(id string) ([]Repair, int) {
	p.guardMu.Lock()
	defer p.guardMu.Unlock()
	return append([]Repair(nil), p.repairs[id]...), p.repairCount[id]
}

// GuardNote says, for a person, what the guard repaired in the volume;
// "" when nothing. Volume health reports it (QuotaEscapeRepaired).
func (p *Pool) GuardNote(id string) string {
	reps, n := p.Repairs(id)
	if n == 0 {
		return ""
	}
	last := reps[len(reps)-1]
	if last.Subvolume == 0 {
		return fmt.Sprintf("a process in the pod changed the volume's CephFS quota %d time(s); the latest, at %s: %s",
			n, last.At.UTC().Format(time.RFC3339), last.Did)
	}
	return fmt.Sprintf("a process in the pod made a btrfs subvolume outside the volume's quota %d time(s); the latest, at %s (subvolume %d, %s): %s. "+
		"Its data now counts against this volume; the volume may stand over its size until the pod deletes data",
		n, last.Path, last.Subvolume, last.At.UTC().Format(time.RFC3339), last.Did)
}

// limitedToNothing reports whether subvolume id's own qgroup has a
// referenced-bytes limit of 0 (sysfs shows 0 for no limit too: the
// flags tell them apart).
func limitedToNothing(uuid string, id uint64) (bool, error) {
	dir := fmt.Sprintf("/sys/fs/btrfs/%s/qgroups/0_%d/", uuid, id)
	flags, err := readSysfsUint(dir + "limit_flags")
	if err != nil {
		return false, err
	}
	max, err := readSysfsUint(dir + "max_referenced")
	return flags&qgroupLimitRfer != 0 && max == 0, err
}
