package loop

import (
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A backing file is reported by sysfs as the kernel's d_path of the file,
// resolved from the mount it was opened through. When that mount is not
// reachable from our root — the device was attached by a process in another
// mount namespace, typically a driver pod that has since been replaced, and
// the pod's bind mount of the pool died with it — the kernel reports the
// path relative to that mount's root: "/volumes/fv-1.img" for a pool that
// pod had mounted at /pool. No path here names it, so a pure path match
// would never find the device again: unstage would leave it attached and
// the image's space pinned after DeleteVolume. Such a path is a suffix of
// ours, and the device's identity decides: LOOP_GET_STATUS64 reports the
// device and inode numbers of the file the kernel holds.

// matcher returns the test Find and DetachFile apply to each attached
// device: is it backed by the file at path?
func matcher(path string) func(Device) bool {
	want := matchPaths(path)
	return func(d Device) bool {
		if slices.Contains(want, d.BackingFile) {
			return true
		}
		return foreignMatch(d, want[0])
	}
}

// foreignMatch reports whether d, whose backing path is not path, is
// nevertheless backed by the file at path, attached through a mount that is
// not reachable from here (see above). A file still present must have the
// same device and inode; one already unlinked (the kernel says "deleted")
// can only be recognised by its filesystem: the same device as path's
// directory, and the same name relative to the mount. Names in a filevol
// pool carry 128-bit random IDs, so that is unambiguous there.
func foreignMatch(d Device, path string) bool {
	if !strings.HasPrefix(d.BackingFile, "/") || d.BackingFile == path || !strings.HasSuffix(path, d.BackingFile) {
		return false
	}
	dev, ino, ok := backingIdentity(d.Number)
	if !ok {
		return false
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		return !d.Deleted && st.Dev == dev && st.Ino == ino
	}
	if !d.Deleted || unix.Stat(filepath.Dir(path), &st) != nil {
		return false
	}
	return st.Dev == dev
}

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

// resolveUnder rewrites the backing path of each device attached through an
// unreachable mount (see above) whose file lies under dir, so callers that
// know their files by path under dir see it. That mount's root was dir
// itself or one of its ancestors (a pod may mount a parent of the pool), so
// each is tried in turn, deepest first.
func resolveUnder(devs []Device, dir string) []Device {
	dir = filepath.Clean(dir)
	out := slices.Clone(devs)
	for i, d := range out {
		if strings.HasPrefix(d.BackingFile, dir+"/") || !strings.HasPrefix(d.BackingFile, "/") {
			continue
		}
		for root := dir; ; root = filepath.Dir(root) {
			candidate := filepath.Join(root, d.BackingFile)
			if strings.HasPrefix(candidate, dir+"/") && foreignMatch(d, candidate) {
				out[i].BackingFile = candidate
				break
			}
			if root == "/" {
				break
			}
		}
	}
	return out
}
