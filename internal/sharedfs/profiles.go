package sharedfs

import (
	"fmt"
	"io/fs"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// profile is what one kind of filesystem needs of a shared pool and how
// to check it from a client.
type profile struct {
	kind Kind
	// needs are the settings check reads (Settings' names).
	needs []string
	// check fills r.Found and r.Warnings and returns the requirements
	// unmet, reaching the client through e.
	check func(r *Report, t mount.Table, m mount.Info, e env) []*Unmet
}

// env is how a profile reaches the client: the real one in Check, fakes in
// tests.
type env struct {
	// open gives a directory as an fs.FS (os.DirFS).
	open func(string) fs.FS
	// ceph reaches ceph-fuse clients.
	ceph cephEnv
}

// glusterCheck adapts checkGlusterFS, which reads files only.
func glusterCheck(r *Report, t mount.Table, m mount.Info, e env) []*Unmet {
	return checkGlusterFS(r, t, m, e.open)
}

// The profiles, one per kind.
var (
	// localProfile: one kernel holds every lock and every cache; a pool
	// shared by processes of one host needs nothing more.
	localProfile = profile{kind: KindLocal}
	// glusterProfile: docs/shared-pools-glusterfs.md's requirements.
	glusterProfile = profile{kind: KindGlusterFS, needs: GlusterFSSettings(), check: glusterCheck}
	// cephProfile: docs/shared-pools-cephfs.md's requirements of a
	// ceph-fuse client.
	cephProfile = profile{kind: KindCephFS, needs: CephSettings(), check: checkCephFS}
	// otherProfile: not known, not refused; a warning says so.
	otherProfile = profile{kind: KindOther, check: warnOther}
)

// localTypes are filesystems of this kernel alone (mountinfo's type).
var localTypes = []string{"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "bcachefs", "jfs", "reiserfs", "nilfs2", "tmpfs", "ramfs", "overlay"}

// localMagics are statfs types of local filesystems, for a directory
// whose mount the table does not show.
var localMagics = []int64{unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.F2FS_SUPER_MAGIC,
	unix.BCACHEFS_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.RAMFS_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, 0x2fc12fc1 /* zfs */}

// profileOf picks the profile for a mount's type (empty: the mount was
// not found) and statfs's magic. GlusterFS and CephFS are told by their
// types only: a FUSE mount the table does not show is "other", and so is
// the kernel's CephFS client (type ceph), whose caches and locks nothing
// here has measured.
func profileOf(fstype string, magic int64) profile {
	switch {
	case fstype == "fuse.glusterfs":
		return glusterProfile
	case fstype == "fuse.ceph-fuse":
		return cephProfile
	case slices.Contains(localTypes, fstype):
		return localProfile
	case fstype == "" && slices.Contains(localMagics, magic):
		return localProfile
	}
	return otherProfile
}

// check runs the profile of the filesystem found (m, when ok).
func check(r *Report, t mount.Table, m mount.Info, ok bool, e env) []*Unmet {
	fstype := ""
	if ok {
		fstype = m.FSType
	}
	p := profileOf(fstype, r.Magic)
	r.Kind = p.kind
	if p.check == nil {
		return nil
	}
	return p.check(r, t, m, e)
}

func warnOther(r *Report, _ mount.Table, _ mount.Info, _ env) []*Unmet {
	what := fmt.Sprintf("statfs type %#x, its mount not found in the mount table", r.Magic)
	if r.FSType != "" {
		what = fmt.Sprintf("%s %s at %s", r.FSType, r.Source, r.MountPoint)
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf("shared pool %s is on %s, a filesystem filevol does not know: nothing of it is checked "+
		"and nothing is guaranteed (fencing rests on its server's lock recovery, coherence on its clients' caches; "+
		"tested only on GlusterFS and ceph-fuse, docs/shared-pools.md)", r.Dir, what))
	return nil
}
