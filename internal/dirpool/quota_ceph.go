package dirpool

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/volume"
)

// A pool on CephFS (a ceph-fuse mount) holds a volume to its size with a
// CephFS quota: the directory's virtual extended attribute
// ceph.quota.max_bytes, which every client enforces on the whole subtree
// (EDQUOT once the bytes it knows of reach the limit), so one limit holds
// on every node of a shared pool. A volume is a plain directory,
// recognised by its inode as in a plain pool (dirVolumes); its usage is
// ceph.dir.rbytes, the MDS's recursive byte count.
//
// What test/ceph measured on Ceph 16.2.15 (docs/shared-pools-cephfs.md):
// a writer in the volume's top directory gets EDQUOT at the size plus
// one write, on any client; a writer deeper in the tree gets it after
// about a second of writing, however much that was (the MDS propagates
// counts up the tree lazily), and a quota a pod sets on a subdirectory
// does not lift the volume's. CephFS lets a user who is not root set the
// quota of a directory it may write (the volume's owner lifted it, as a
// pod running as that uid would), so a pod can lift its volume's limit:
// the guard (guard) puts it back. What the guard does not see: snapshots
// a pod takes inside its volume (the owner may), whose data counts
// against no limit; Ceph's documentation says a client whose MDS
// capability lacks the "s" flag (and "p", for quotas) cannot, and the
// nodes' clients are the deployment's to give.
const (
	xattrMaxBytes = "ceph.quota.max_bytes"
	xattrRBytes   = "ceph.dir.rbytes"
	// cephSnapDir is where a CephFS directory's snapshots appear (the
	// client's default client_snapdir): not listed by readdir, and a
	// directory holding one cannot be removed (ENOTEMPTY).
	cephSnapDir = ".snap"
)

// isCephFS reports whether the FUSE filesystem of fd is CephFS: its
// recursive byte count is readable. Asking the filesystem itself, on the
// descriptor the pool holds, rather than /proc/self/mountinfo's type
// (fuse.ceph-fuse) answers the question that matters (are the quota
// attributes there?) in one call and needs no search for the mount that
// holds the directory, which in a container is a bind of a host path.
func isCephFS(fd int) bool {
	_, err := getXattrInt(fd, xattrRBytes)
	return err == nil
}

// cephQuota is the quota of a pool on CephFS.
type cephQuota struct {
	dirVolumes
	mu sync.Mutex
	// expanding holds the limit an Expand set before its record changed,
	// so that the guard does not take it for a pod's.
	expanding map[string]int64
}

func openCephQuota(p *Pool) *cephQuota {
	klog.InfoS("Directory pool on CephFS: volume sizes are CephFS quotas ("+xattrMaxBytes+"), enforced by every client", "pool", p.dir)
	return &cephQuota{dirVolumes: dirVolumes{p: p, fsType: "CephFS"}, expanding: map[string]int64{}}
}

func (q *cephQuota) mode() string {
	return "cephfs quota (" + xattrMaxBytes + " on each volume's directory, enforced by every client; the guard puts back a limit a pod changes)"
}

// nestedCounted: CephFS has no nested subvolumes; a subdirectory with a
// quota of its own still counts against the volume's (measured: test/ceph
// TestDirectoryPoolQuotaDeepInTheTree).
func (q *cephQuota) nestedCounted() bool { return true }

// guarded: a pod can change its volume's quota attribute.
func (q *cephQuota) guarded() bool { return true }

// checkCreate: no nesting; clones are copies (makeVolume).
func (q *cephQuota) checkCreate(_ Params, rel string, _ bool) error {
	return q.checkDirCreate(rel, false)
}

// checkSnapshot: CephFS snapshots (snap_ceph.go); whether the cluster
// allows them is known when one is asked for.
func (q *cephQuota) checkSnapshot() error { return nil }

// makeVolume makes the volume's directory and sets its quota; the
// rename into place keeps the attribute (it is the inode's). A restore
// or clone is then a copy (copytree.go) of the source's snapshot, the
// quota set first.
func (q *cephQuota) makeVolume(tmp int, v *Volume) error {
	if err := q.makeDir(tmp, v); err != nil {
		return err
	}
	fd, err := openBeneath(tmp, v.ID)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := setMaxBytes(fd, v.CapacityBytes); err != nil {
		return err
	}
	if v.ContentSource == nil {
		return nil
	}
	if err := q.copySource(fd, v); err != nil {
		return err
	}
	return ownVolume(fd, *v) // the copy gave the root the source's times and attributes
}

// copySource copies v's content source into fd: a snapshot's tree, or
// a volume's through a CephFS snapshot taken for the copy (a live tree
// is no consistent source) and removed after it. A crash leaves that
// snapshot under .tmp-<v.ID>, which repair removes (snapshot.go).
func (q *cephQuota) copySource(fd int, v *Volume) error {
	start := time.Now()
	src, err := q.p.openSource(v.ContentSource)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	from := src
	if v.ContentSource.Kind == volume.SourceVolume {
		dir, err := q.p.snapper.dirOf(src)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		name := tmpPrefix + v.ID
		if err := q.p.snapper.remove(dir, name); err != nil {
			return err
		}
		if err := q.p.snapper.take(src, dir, name); err != nil {
			return err
		}
		defer func() { _ = q.p.snapper.remove(dir, name) }()
		snap, err := openBeneath(dir, name)
		if err != nil {
			return err
		}
		defer unix.Close(snap)
		from = snap
	}
	bytes, files, err := copyTree(from, fd, v.CapacityBytes)
	if err != nil {
		return err
	}
	took := time.Since(start)
	klog.V(2).InfoS("Directory volume copied from its source", "volumeID", v.ID, "source", v.ContentSource.ID,
		"bytes", bytes, "files", files, "took", took.Round(time.Millisecond))
	return nil
}

// setLimit changes the quota, online: every client sees it within a
// fraction of a second.
func (q *cephQuota) setLimit(fd int, v Volume, bytes int64) error {
	q.mu.Lock()
	q.expanding[v.ID] = bytes
	q.mu.Unlock()
	return setMaxBytes(fd, bytes)
}

// usage is the MDS's recursive byte count and the quota. The count is
// propagated up the tree lazily: a write deep in the volume may show
// seconds later.
func (q *cephQuota) usage(v Volume) (used, limit int64, err error) {
	fd, err := q.p.openVolume(v)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	if used, err = getXattrInt(fd, xattrRBytes); err != nil {
		return 0, 0, err
	}
	limit, err = getXattrInt(fd, xattrMaxBytes)
	if errors.Is(err, unix.ENODATA) {
		// Lifted (by a pod, until the guard's next pass): the record's.
		return used, v.CapacityBytes, nil
	}
	return used, limit, err
}

// release lifts the quota: 0 is none (removexattr is refused with
// ENODATA and leaves the quota in place, measured).
func (q *cephQuota) release(fd int, _ Volume) error { return setMaxBytes(fd, 0) }

// destroy lifts the quota of the tree first: a directory moved out of a
// quota's subtree (removeTree moves deep parts to the trash's top) is
// refused with EXDEV while the quota stands.
func (q *cephQuota) destroy(parent int, name string) error {
	fd, err := openBeneath(parent, name)
	if err == nil {
		err = setMaxBytes(fd, 0)
		_ = unix.Close(fd)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	return q.dirVolumes.destroy(parent, name)
}

func (q *cephQuota) destroyTrashed(trash, _ int, name string) error { return q.destroy(trash, name) }

// guard puts back the quota of every volume whose ceph.quota.max_bytes
// is not its record's size (a pod lifted or raised it), and remembers
// what it did for the volume's health.
func (q *cephQuota) guard() error {
	vols := map[uint64]Volume{}
	var errs []error
	for _, v := range q.p.vols.List() {
		if v.Unenforced || v.Inode == 0 {
			continue
		}
		vols[v.Inode] = v
		did, err := q.guardVolume(v)
		errs = append(errs, err)
		if did == "" {
			continue
		}
		rep := Repair{Path: v.Path, Did: did, At: time.Now()}
		klog.InfoS("A directory volume's CephFS quota was changed: put back", "pool", q.p.dir, "volumeID", v.ID, "did", did)
		q.p.remember(v.ID, rep)
	}
	q.p.forgetAllBut(vols)
	return errors.Join(errs...)
}

// guardVolume checks one volume's quota; what it did, or "".
func (q *cephQuota) guardVolume(v Volume) (string, error) {
	fd, err := q.p.openVolume(v)
	if errors.Is(err, unix.ENOENT) {
		return "", nil // deleted meanwhile
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	cur, err := getXattrInt(fd, xattrMaxBytes)
	if errors.Is(err, unix.ENODATA) {
		cur, err = 0, nil
	}
	if err != nil {
		return "", err
	}
	q.mu.Lock()
	pending, ok := q.expanding[v.ID]
	if cur == v.CapacityBytes {
		delete(q.expanding, v.ID) // the record has caught up
	}
	q.mu.Unlock()
	if cur == v.CapacityBytes || (ok && cur == pending) {
		return "", nil
	}
	if err := setMaxBytes(fd, v.CapacityBytes); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s was %d (0: no limit), set back to %d", xattrMaxBytes, cur, v.CapacityBytes), nil
}

// setMaxBytes sets the quota of the directory fd; 0 lifts it.
func setMaxBytes(fd int, bytes int64) error {
	if err := unix.Fsetxattr(fd, xattrMaxBytes, []byte(strconv.FormatInt(bytes, 10)), 0); err != nil {
		return fmt.Errorf("set %s to %d: %w", xattrMaxBytes, bytes, err)
	}
	return nil
}

// getXattrInt reads a CephFS virtual attribute holding a number.
func getXattrInt(fd int, name string) (int64, error) {
	buf := make([]byte, 32)
	n, err := unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(buf[:n]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q: %w", name, buf[:n], err)
	}
	return v, nil
}

// removeSnapshots removes the snapshots of the directory name in parent
// (CephFS: the entries of its .snap that are its own), so that it can be
// removed: how many it removed. Elsewhere there is no .snap (ENOENT): none.
func removeSnapshots(parent int, name string) (int, error) {
	fd, err := openBeneath(parent, name+"/"+cephSnapDir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return 0, nil
		}
		return 0, err
	}
	defer unix.Close(fd)
	n := 0
	errs, err := eachEntry(fd, name+"/"+cephSnapDir, func(e os.DirEntry) error {
		if strings.HasPrefix(e.Name(), "_") {
			// _NAME_INO: a snapshot of the ancestor INO, seen from
			// here; it goes with that ancestor's (rmdir here: EINVAL).
			return nil
		}
		if err := unix.Unlinkat(fd, e.Name(), unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove snapshot %s of %s: %w", e.Name(), name, err)
		}
		n++
		return nil
	})
	errs.add(err)
	return n, errs.err(name)
}
