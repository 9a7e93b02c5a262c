package faults

import (
	"errors"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// CreateSnapshot freezes a mounted volume's filesystem (FIFREEZE) while it
// clones the image. A driver killed in between leaves the filesystem
// frozen: every writer in the pod blocks, and a reboot is the only thing
// that thaws it unless the driver does. These helpers find and thaw such
// filesystems; they act only on filesystems mounted under the test's own
// directory, and only while nothing else is in flight on them.

// fsMountRoots are the filesystem mounts (not binds, not device nodes)
// under dir: one per staged mount volume.
func fsMountRoots(dir string) []string {
	table, err := mount.Read()
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{} // one mount point per filesystem
	for _, m := range table.Under(dir) {
		key := m.Source + "\x00" + m.FSType
		if m.Root == "/" && !seen[key] && slices.Contains([]string{"ext4", "xfs", "btrfs"}, m.FSType) {
			seen[key] = true
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// frozenUnder returns the filesystems under dir that are frozen. It probes
// with FIFREEZE, which answers EBUSY for a frozen filesystem, and thaws at
// once what the probe itself froze.
func frozenUnder(dir string) []string {
	var frozen []string
	for _, mp := range fsMountRoots(dir) {
		err := fs.Freeze(mp)
		switch {
		case err == nil:
			_ = fs.Thaw(mp)
		case errors.Is(err, unix.EBUSY):
			frozen = append(frozen, mp)
		}
	}
	return frozen
}

// thawUnder thaws every filesystem under dir, as a reboot does.
func thawUnder(dir string) {
	for _, mp := range fsMountRoots(dir) {
		_ = fs.Thaw(mp)
	}
}
