// Package cgroup finds the cgroup of a Kubernetes pod and sets block I/O
// throttling on it, for one block device: blkio.throttle.*_device on a
// cgroup v1 blkio hierarchy, io.max on cgroup v2. It only writes the
// throttling files of the pods' cgroups it is given; it creates, moves
// and removes nothing.
//
// It imports nothing of filevol but is, like every hostos package, free
// of gRPC, the CSI spec and the pool.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrPodNotFound: no cgroup of the pod under a hierarchy (the pod is not
// running on this node, or the hierarchy is not the one kubelet uses).
var ErrPodNotFound = errors.New("pod cgroup not found")

// Limits are the throttling of one device, per second; 0 is no limit.
type Limits struct {
	ReadIOPS, WriteIOPS, ReadBPS, WriteBPS uint64
}

// Hierarchy is a mounted cgroup hierarchy that throttles block I/O.
type Hierarchy struct {
	// Root is where it is mounted (or a directory below, whose subtree
	// holds kubelet's cgroups).
	Root string
	// V2 is a unified (cgroup2) hierarchy: io.max; else v1 blkio.
	V2 bool
}

// Detect returns the hierarchies among roots that can throttle block
// I/O: a v1 blkio one (its root has blkio.throttle.read_bps_device), or a
// v2 one whose root offers the io controller (cgroup.controllers lists
// "io"). A cgroup v2 node has one, /sys/fs/cgroup; a v1 node its blkio
// hierarchy, /sys/fs/cgroup/blkio. A hybrid node's /sys/fs/cgroup/unified
// has no io controller while blkio is bound to v1, and is left out.
func Detect(roots []string) []Hierarchy {
	var out []Hierarchy
	for _, r := range roots {
		if exists(filepath.Join(r, "blkio.throttle.read_bps_device")) {
			out = append(out, Hierarchy{Root: r})
			continue
		}
		if b, err := os.ReadFile(filepath.Join(r, "cgroup.controllers")); err == nil && hasWord(string(b), "io") {
			out = append(out, Hierarchy{Root: r, V2: true})
		}
	}
	return out
}

// maxDepth bounds the search for a pod's cgroup below a root. kubelet puts
// them at depth 2 or 3 (kubepods/[qos/]pod<uid>); a node in a container
// (kind) or a --cgroup-root adds a level or two.
const maxDepth = 6

// FindPod returns the directory of the pod's cgroup, by the names kubelet
// gives it:
//
//	cgroupfs driver: kubepods/pod<uid>, kubepods/{burstable,besteffort}/pod<uid>
//	systemd driver:  kubepods.slice/kubepods-pod<uid_>.slice,
//	                 kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice
//
// where uid_ is the UID with its dashes made underscores (systemd reserves
// "-" for the slice hierarchy). Any depth up to maxDepth is searched, so
// that a --cgroup-root or a node in a container is found as well; the
// search does not enter a directory that is not on the way to kubepods.
func (h Hierarchy) FindPod(uid string) (string, error) {
	if uid == "" || strings.ContainsAny(uid, "/\x00") {
		return "", fmt.Errorf("%w: invalid pod UID %q", ErrPodNotFound, uid)
	}
	cgroupfs := "pod" + uid
	systemd := "-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	var found string
	err := filepath.WalkDir(h.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == h.Root {
				return err
			}
			return nil // a cgroup removed during the walk
		}
		if !d.IsDir() || p == h.Root {
			return nil
		}
		name := d.Name()
		if name == cgroupfs || strings.HasSuffix(name, systemd) {
			found = p
			return fs.SkipAll
		}
		rel, _ := filepath.Rel(h.Root, p)
		depth := strings.Count(rel, "/") + 1
		// A pod of another UID, or too deep: nothing of ours below.
		if depth >= maxDepth || strings.HasPrefix(name, "pod") || strings.Contains(name, "-pod") {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("search %s for pod %s: %w", h.Root, uid, err)
	}
	if found == "" {
		return "", fmt.Errorf("%w: pod %s under %s", ErrPodNotFound, uid, h.Root)
	}
	return found, nil
}

// DeviceNumber returns "major:minor" of the block device node at path,
// as the throttling files name devices.
func DeviceNumber(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", fmt.Errorf("%s is not a block device", path)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
