package dirpool

import (
	"errors"

	"golang.org/x/sys/unix"
)

// claimMode is the mode of the empty directory renameDirNoReplace makes
// at the target before it renames over it, so that a claim a crash left
// can be told from an operator's directory (removeStaleClaim); a volume
// whose class asks for directoryPerms 0 is told apart by its record.
const claimMode = 0

// renameDirNoReplace renames the directory from in fromDir to to in
// toDir, never over anything (EEXIST when to exists). It is
// renameat2(RENAME_NOREPLACE) where the filesystem has it. ceph-fuse
// (16.2.15) refuses that flag (EINVAL), so there the target is claimed
// first with an empty directory of its own, made atomically (mkdir
// fails with EEXIST when anything is there), and the rename replaces
// that claim: rename(2) replaces an empty directory, never a non-empty
// one (ENOTEMPTY) or a file (ENOTDIR). A crash between the two leaves
// the claim, an empty directory of mode 0, which removeStaleClaim
// removes at repair.
func renameDirNoReplace(fromDir int, from string, toDir int, to string) error {
	err := unix.Renameat2(fromDir, from, toDir, to, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	// EINVAL is also a directory moved into itself: the claim's rename
	// then fails the same way and the claim goes.
	if err := unix.Mkdirat(toDir, to, claimMode); err != nil {
		return err
	}
	if err := unix.Renameat(fromDir, from, toDir, to); err != nil {
		_ = unix.Unlinkat(toDir, to, unix.AT_REMOVEDIR)
		return err
	}
	return nil
}

// removeStaleClaim removes name in dir when it is a claim a crash left
// (renameDirNoReplace): an empty directory of mode 0 whose inode is no
// volume's. It reports whether it did. Only a repair, which holds the
// pool alone, calls it: a claim of a rename in flight looks the same.
func (p *Pool) removeStaleClaim(dir int, name string) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o7777 != claimMode {
		return false
	}
	for _, v := range p.vols.List() {
		if v.Inode == st.Ino {
			return false
		}
	}
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR) == nil // fails unless empty
}
