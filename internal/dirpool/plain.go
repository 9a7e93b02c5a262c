package dirpool

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/filevol/filevol/internal/volctx"
	"golang.org/x/sys/unix"
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

// Sentinel errors of plain pools; internal/csi/errors.go maps them.
var (
	// ErrNoQuota: the pool's filesystem has no quota filevol can enforce,
	// and the class did not allow an unenforced size.
	ErrNoQuota = errors.New("the directory pool has no usable quota")
	// ErrNoSnapshots: snapshots and clones need a btrfs pool.
	ErrNoSnapshots = errors.New("directory volume snapshots need a btrfs pool")
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

// checkPlainCreate refuses what a plain pool cannot give.
func (p *Pool) checkPlainCreate(params Params, rel string, hasSource bool) error {
	if !p.plain {
		return nil
	}
	if !params.AllowUnenforced {
		return fmt.Errorf("%w: directory pool %s is on %s, where filevol has no quota to enforce a volume's size on this kernel; "+
			"set %s: \"true\" in the StorageClass to create volumes whose size is NOT enforced, or put the pool on btrfs",
			ErrNoQuota, p.dir, p.fsType, ParamAllowUnenforcedSize)
	}
	if hasSource {
		return fmt.Errorf("%w: directory pool %s is on %s: a clone or restore of a directory volume needs btrfs snapshots", ErrNoSnapshots, p.dir, p.fsType)
	}
	// No volume inside another: on btrfs the device number of each parent
	// shows it (makeParents); here the records do.
	for _, v := range p.vols.List() {
		if strings.HasPrefix(rel, v.Path+"/") || strings.HasPrefix(v.Path, rel+"/") {
			return fmt.Errorf("%w: %s would nest with volume %s at %s", ErrInvalidPath, rel, v.ID, v.Path)
		}
	}
	return nil
}

// makePlainDir makes tmp/<id> a directory with the volume's owner and mode.
func (p *Pool) makePlainDir(tmp int, v *Volume) error {
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
	v.Inode, v.Unenforced = st.Ino, true
	if err := unix.Fchown(fd, int(v.UID), int(v.GID)); err != nil {
		return fmt.Errorf("chown the volume's directory to %d:%d: %w", v.UID, v.GID, err)
	}
	if err := unix.Fchmod(fd, v.Mode); err != nil {
		return fmt.Errorf("chmod the volume's directory to %o: %w", v.Mode, err)
	}
	return nil
}

// checkPlain checks that fd is the volume's directory: its inode, on the
// pool's filesystem.
func (p *Pool) checkPlain(fd int, v Volume) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Ino != v.Inode || st.Dev != p.rootDev {
		return fmt.Errorf("%w: %s is inode %d, volume %s is inode %d", ErrNotVolume, v.Path, st.Ino, v.ID, v.Inode)
	}
	return nil
}

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
		if err := unix.Renameat2(parent, name, trash, deepPrefix+randomSuffix(), unix.RENAME_NOREPLACE); err != nil {
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
			return errDeferred // a deep part moved to the top: the next pass
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
