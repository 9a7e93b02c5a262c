package loop

import (
	"path/filepath"
	"slices"
	"strings"
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
// ours, and the file's identity decides (foreignMatch, identity_linux.go).

// matcher returns the test Find and DetachFile apply to each attached
// device: is it backed by the file at path?
func matcher(path string) func(Device) bool {
	want := matchPaths(path)
	return func(d Device) bool {
		return slices.Contains(want, d.BackingFile) || foreignMatch(d, want[0])
	}
}

// mountRelative reports whether d's backing path could be path as seen
// from an unreachable mount: absolute, not path itself, and a suffix of it.
// Only such devices are worth foreignMatch's system calls.
func mountRelative(d Device, path string) bool {
	return strings.HasPrefix(d.BackingFile, "/") && d.BackingFile != path && strings.HasSuffix(path, d.BackingFile)
}

// resolveUnder rewrites the backing path of each device attached through an
// unreachable mount whose file lies under dir, so callers that know their
// files by path under dir see it. That mount's root was dir itself or one
// of its ancestors (a pod may mount a parent of the pool), so each is tried
// in turn, deepest first.
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
