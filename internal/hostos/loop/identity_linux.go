package loop

import (
	"bytes"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// foreignMatch reports whether d, whose backing path is not path, is
// nevertheless backed by the file at path, attached through a mount that is
// not reachable from here (identity.go). A file still present must have the
// same device and inode; one already unlinked (the kernel says "deleted")
// can only be recognised by its filesystem: the same device as path's
// directory, and the same name relative to the mount. Names in a filevol
// pool carry 128-bit random IDs, so that is unambiguous there.
//
// The candidate is stat'ed before the device is opened: Loops.List resolves
// every device not under the pool this way, and most of them (other
// software's) name no file there, so they are never opened.
func foreignMatch(d Device, path string) bool {
	if !mountRelative(d, path) {
		return false
	}
	var st unix.Stat_t
	present := unix.Stat(path, &st) == nil
	if present == d.Deleted {
		return false // a live file for a deleted backing, or the reverse
	}
	if !present && unix.Stat(filepath.Dir(path), &st) != nil {
		return false
	}
	dev, ino, ok := backingIdentity(d.Number)
	return ok && st.Dev == dev && (!present || st.Ino == ino)
}

func backedBy(d Device, path string) bool {
	var st unix.Stat_t
	if d.Deleted {
		path = filepath.Dir(path)
	}
	if unix.Stat(path, &st) != nil {
		return false
	}
	dev, ino, ok := backingIdentity(d.Number)
	return ok && st.Dev == dev && (d.Deleted || st.Ino == ino)
}

func ownerOf(n int) string {
	fd, err := openFD(devPath(n), unix.O_RDONLY)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	if err != nil {
		return ""
	}
	name := info.File_name[:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	owner, ok := bytes.CutPrefix(name, []byte(ownerPrefix))
	if !ok {
		return "" // a path: attached without an owner
	}
	return string(owner)
}

// ownerPrefix starts lo_file_name when it carries an owner, not a path
// (paths are absolute).
const ownerPrefix = "owner:"

// backingIdentity returns the device and inode numbers of loopN's backing
// file. It opens the device read-only and not exclusively, which neither
// blocks a mount nor claims the device; ok is false when the device cannot
// be opened or is not attached.
func backingIdentity(n int) (dev, ino uint64, ok bool) {
	fd, err := openFD(devPath(n), unix.O_RDONLY)
	if err != nil {
		return 0, 0, false
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	if err != nil {
		return 0, 0, false
	}
	return info.Device, info.Inode, true
}
