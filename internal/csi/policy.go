package csi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// Mount policy: no mount option a CO passes may escalate what a pod can do.
//
// Every filevol filesystem is mounted nosuid and nodev, at the staging path
// and therefore in every bind of it: a pod that can write to its volume must
// not be able to plant a setuid binary or a device node that reaches the
// host's disks and have either honoured on the node. A request that asks
// for the opposite (suid, dev) is refused with INVALID_ARGUMENT instead of
// silently ignored. Options that change the mount tree itself (bind,
// rbind, remount) are filevol's to choose, never the CO's, and are refused
// as well. Everything else (noatime, discard, data=..., ...) is passed on;
// the kernel refuses what the filesystem does not know.
var (
	alwaysMountOptions  = volume.AlwaysMountOptions
	refusedMountOptions = map[string]string{
		"suid":     "volumes are always mounted nosuid",
		"dev":      "volumes are always mounted nodev",
		"defaults": "it implies suid and dev; volumes are always mounted nosuid,nodev",
		"bind":     "filevol decides how volumes are bound",
		"rbind":    "filevol decides how volumes are bound",
		"remount":  "filevol decides when volumes are remounted",
	}
)

// checkMountFlags validates the CO's mount flags against the policy and
// the syntax mount(2) accepts.
func checkMountFlags(flags []string) error {
	for _, f := range flags {
		if why, refused := refusedMountOptions[strings.TrimSpace(f)]; refused {
			return invalidArgument("mount option %q is not allowed: %s", f, why)
		}
	}
	if _, _, err := mount.SplitOptions(flags); err != nil {
		return invalidArgument("mount flags: %v", err)
	}
	return nil
}

// pathPolicy confines staging and target paths to the kubelet directory,
// so a request can never make filevol mount over, or remove, anything else
// on the node. An empty kubeletDir disables the check (tests, `make run`).
type pathPolicy struct{ kubeletDir string }

// check validates p (absolute, no "..", no NUL, bounded) and, with a
// kubelet directory set, that p and whatever its existing ancestors resolve
// to through symlinks stay inside it. It returns the cleaned path.
func (pp pathPolicy) check(what, p string) (string, error) {
	if err := checkPath(what, p); err != nil {
		return "", err
	}
	p = filepath.Clean(p)
	if pp.kubeletDir == "" {
		return p, nil
	}
	root := filepath.Clean(pp.kubeletDir)
	if !volview.Within(p, root) {
		return "", invalidArgument("%s %s is outside the kubelet directory %s", what, p, root)
	}
	resolved, err := resolveExisting(p)
	if err != nil {
		return "", invalidArgument("%s %s: %v", what, p, err)
	}
	rootResolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		rootResolved = root
	}
	if !volview.Within(resolved, rootResolved) {
		return "", invalidArgument("%s %s resolves to %s, outside the kubelet directory %s", what, p, resolved, root)
	}
	return p, nil
}

// resolveExisting resolves symlinks in the longest existing prefix of p and
// appends the rest, which does not exist yet and so cannot be a link.
func resolveExisting(p string) (string, error) {
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) || cur == "/" {
			return "", err
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}
