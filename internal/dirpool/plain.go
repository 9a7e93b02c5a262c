package dirpool

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/volctx"
	"github.com/filevol/filevol/internal/volume"
)

// A pool on a filesystem without a quota filevol can enforce (ext4 and
// xfs on kernels without their quota support, a shared GlusterFS or NFS
// mount, anything but btrfs) is a plain pool: a volume is a plain
// directory, with its owner and mode, and no limit. Its creates are
// refused (ErrNoQuota) unless the class sets allowUnenforcedSize: "true";
// then the volume's size is a number in its record and nothing more, and
// every answer says so: the volume context (ContextSizeEnforced), the
// node's NodeGetVolumeStats condition message (SizeNote), the logs.
// Snapshots and clones are refused (ErrNoSnapshots): a copy of a live
// directory tree is not consistent, and one that is needs the
// filesystem's help.
//
// A plain volume is recognised by its inode (Volume.Inode) on the pool's
// filesystem, as a btrfs one by its subvolume ID: a directory that
// replaced it is refused. A delete moves it to the trash, as on btrfs,
// and the collector removes the tree (removeTree), never following a
// link or crossing into another mount.

// Volume context keys that describe how a directory volume's size is held.
const (
	ContextSizeEnforced = volctx.SizeEnforced
	ContextSizeNote     = volctx.SizeNote
)

// Sentinel errors of plain pools, of classes that give their gRPC codes.
var (
	// ErrNoQuota: the pool's filesystem has no quota filevol can enforce,
	// and the class did not allow an unenforced size.
	ErrNoQuota = volume.NewError(volume.ClassPrecondition, "the directory pool has no usable quota")
	// ErrNoSnapshots: snapshots and clones need a btrfs or CephFS pool.
	ErrNoSnapshots = volume.NewError(volume.ClassPrecondition, "directory volume snapshots need a btrfs or CephFS pool")
)

// fsName names a filesystem type for messages.
func fsName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse (e.g. GlusterFS)"
	}
	return fmt.Sprintf("type %#x", magic)
}

// noQuota is the quota of a plain pool: a volume is a directory
// (dirVolumes) and its size is not enforced; creates need the class's
// allowUnenforcedSize.
type noQuota struct{ dirVolumes }

// openNoQuota says at open that sizes are not enforced here.
func openNoQuota(p *Pool, magic int64) *noQuota {
	q := &noQuota{dirVolumes{p: p, fsType: fsName(magic)}}
	klog.InfoS("Directory pool is not on btrfs: no quota; volume sizes are NOT enforced, and only classes with "+ParamAllowUnenforcedSize+": \"true\" may create volumes", "pool", p.dir, "filesystem", q.fsType)
	return q
}

// mode says that sizes are not enforced, and on what.
func (q *noQuota) mode() string {
	return "none: volume sizes are not enforced on " + q.fsType + " (only classes with " + ParamAllowUnenforcedSize + " create volumes)"
}

func (q *noQuota) nestedCounted() bool { return false }

func (q *noQuota) guarded() bool { return false }

// checkCreate refuses what a plain pool cannot give.
func (q *noQuota) checkCreate(params Params, rel string, clone bool) error {
	if !params.AllowUnenforced {
		return fmt.Errorf("%w: directory pool %s is on %s, where filevol has no quota to enforce a volume's size on this kernel; "+
			"set %s: \"true\" in the StorageClass to create volumes whose size is NOT enforced, or put the pool on btrfs",
			ErrNoQuota, q.p.dir, q.fsType, ParamAllowUnenforcedSize)
	}
	return q.checkDirCreate(rel, clone)
}

// makeVolume makes the volume's directory, marked as unenforced.
func (q *noQuota) makeVolume(tmp int, v *Volume) error {
	v.Unenforced = true
	return q.makeDir(tmp, v)
}

// setLimit: the record's number is all there is.
func (q *noQuota) setLimit(int, Volume, int64) error { return nil }

// usage is the pool filesystem's, the only one there is.
func (q *noQuota) usage(Volume) (used, total int64, err error) { return q.p.fsUsage() }

// release: no limit to lift.
func (q *noQuota) release(int, Volume) error { return nil }

// dirVolumes is the half of a quota whose volumes are plain directories
// of the pool's filesystem, which noQuota is, and which a quota held on
// a directory (an attribute of it, not a subvolume) would embed too.
type dirVolumes struct {
	p      *Pool
	fsType string // for messages
}

// checkDirCreate refuses a clone (no snapshots here) and a volume that
// would nest with another.
func (d dirVolumes) checkDirCreate(rel string, clone bool) error {
	if clone {
		return fmt.Errorf("%w: directory pool %s is on %s: a clone or restore of a directory volume needs btrfs or CephFS snapshots", ErrNoSnapshots, d.p.dir, d.fsType)
	}
	// No volume inside another: on btrfs the device number of each parent
	// shows it (makeParents); here the records do.
	for _, v := range d.p.vols.List() {
		if strings.HasPrefix(rel, v.Path+"/") || strings.HasPrefix(v.Path, rel+"/") {
			return fmt.Errorf("%w: %s would nest with volume %s at %s", ErrInvalidPath, rel, v.ID, v.Path)
		}
	}
	return nil
}

func (d dirVolumes) checkSnapshot() error {
	return fmt.Errorf("%w: directory pool %s is on %s, which has no consistent snapshot of a directory", ErrNoSnapshots, d.p.dir, d.fsType)
}

// makeDir makes tmp/<id> a directory with the volume's owner and mode,
// and notes its inode in v.
func (d dirVolumes) makeDir(tmp int, v *Volume) error {
	if err := unix.Mkdirat(tmp, v.ID, 0o700); err != nil {
		return fmt.Errorf("make the volume's directory: %w", err)
	}
	fd, err := openBeneath(tmp, v.ID)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	v.Inode = st.Ino
	return ownVolume(fd, *v)
}

// isVolume checks that fd is the volume's directory: its inode, on the
// pool's filesystem.
func (d dirVolumes) isVolume(fd int, v Volume) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Ino != v.Inode || st.Dev != d.p.rootDev {
		return fmt.Errorf("%w: %s is inode %d, volume %s is inode %d", ErrNotVolume, v.Path, st.Ino, v.ID, v.Inode)
	}
	return nil
}

// readyToMove clears the root's inode flags (no subvolume to make
// writable).
func (d dirVolumes) readyToMove(fd int) error { return unprotectRoot(fd, false, true) }

// destroy removes the directory tree (removeTree), deep parts by way of
// the top of the trash.
func (d dirVolumes) destroy(parent int, name string) error {
	trash, err := d.p.metaFD(trashDir)
	if err != nil {
		return err
	}
	defer unix.Close(trash)
	if err := removeTree(trash, parent, name, 0); err != nil && !errors.Is(err, errDeferred) {
		return err
	}
	return nil
}

// destroyTrashed removes the tree where it is: removeTree locks each
// directory only while it removes that directory's own entries, so
// deletes renaming into the trash meanwhile do not wait.
func (d dirVolumes) destroyTrashed(trash, _ int, name string) error { return d.destroy(trash, name) }

// SizeNote says, for a volume whose size is not enforced, that it is not
// and why; "" for one whose size is a quota.
func (p *Pool) SizeNote(id string) string {
	v, err := p.Record(id)
	if err != nil || !v.Unenforced {
		return ""
	}
	return v.sizeNote()
}

func (v Volume) sizeNote() string {
	return fmt.Sprintf("size NOT enforced: %d bytes is the claim's size only; the directory pool has no quota (%s: \"true\"), "+
		"so writes are limited by the pool filesystem's free space alone, and usage is the whole filesystem's", v.CapacityBytes, ParamAllowUnenforcedSize)
}

// fsUsage is the pool filesystem's usage, what an unenforced volume reports.
func (p *Pool) fsUsage() (used, total int64, err error) {
	var s unix.Statfs_t
	if err := unix.Fstatfs(p.root, &s); err != nil {
		return 0, 0, err
	}
	return int64(s.Blocks-s.Bfree) * s.Bsize, int64(s.Blocks) * s.Bsize, nil
}

// maxRemoveDepth bounds how many directories removeTree holds open at
// once; a deeper subtree is moved to the top of the trash and removed
// from there (a pod can make a tree of any depth).
const maxRemoveDepth = 64

// deepPrefix starts the name of a deep subtree moved to the top of the
// trash.
const deepPrefix = "deep."

// removeTree removes the directory tree name in parent: each directory
// opened beneath the last, following no symlink (a symlink is removed,
// never followed) and crossing into no other mount (a mount point inside
// is an error, left for the operator). Hard links are unlinked: the
// files they share with other directories keep their other names.
//
// The immutable and append-only flags a privileged pod may have set are
// cleared where they stand in the way (protect_linux.go): on an entry
// whose unlink is refused (EPERM), file or directory. A flagged
// directory's unlink is refused so too (the kernel looks at the flags
// before it says EISDIR), so its flags are off before its entries are
// removed, before it is moved to the top of the trash and before it is
// removed itself: one ioctl per flagged entry, none for the others.
func removeTree(trash, parent int, name string, depth int) error {
	err := unix.Unlinkat(parent, name, 0)
	if errors.Is(err, unix.EPERM) {
		// Flags on the entry itself (its directory's went before it was
		// opened).
		isDir, uerr := unprotectEntry(parent, name)
		switch {
		case uerr != nil:
			err = errors.Join(err, uerr)
		case isDir:
			err = unix.EISDIR
		default:
			err = unix.Unlinkat(parent, name, 0)
		}
	}
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	if depth >= maxRemoveDepth {
		if err := renameDirNoReplace(parent, name, trash, deepPrefix+randomSuffix()); err != nil {
			return fmt.Errorf("move a deep directory to the top of the trash: %w", err)
		}
		return errDeferred
	}
	fd, err := openBeneath(parent, name)
	if err != nil {
		return err
	}
	err = removeEntries(trash, fd, name, depth)
	_ = unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		if errors.Is(err, unix.ENOTEMPTY) {
			// CephFS snapshots a pod took keep the directory (their
			// entries are not listed); else a deep part moved to the
			// top: the next pass.
			n, serr := removeSnapshots(parent, name)
			if serr != nil {
				return serr
			}
			if n == 0 || unix.Unlinkat(parent, name, unix.AT_REMOVEDIR) != nil {
				return errDeferred
			}
			return nil
		}
		return fmt.Errorf("remove directory %s: %w", name, err)
	}
	return nil
}

var errDeferred = errors.New("part of the tree moved to the top of the trash")

// removeEntries removes every entry of the directory fd (removeTree of
// each, one level deeper), reading their names in batches. An entry the
// listing misses while the directory changes under it is left; the
// caller's rmdir then fails with ENOTEMPTY and the next pass of the
// collector finishes.
func removeEntries(trash, fd int, name string, depth int) error {
	errs, err := eachEntry(fd, name, func(e os.DirEntry) error {
		if err := removeTree(trash, fd, e.Name(), depth+1); !errors.Is(err, errDeferred) {
			return err
		}
		return nil
	})
	errs.add(err)
	return errs.err(name)
}
