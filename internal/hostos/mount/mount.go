// Package mount mounts and unmounts with mount(2)/umount2(2) and answers
// questions about the mount table from /proc/self/mountinfo. It runs no
// programs and must not import gRPC, CSI or pool.
package mount

import "errors"

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrNotMounted: the path is not a mount point.
	ErrNotMounted = errors.New("not a mount point")
	// ErrInvalidOption: a mount option is malformed or not allowed.
	ErrInvalidOption = errors.New("invalid mount option")
	// ErrTableFull: the mount namespace holds as many mounts as the
	// kernel allows (sysctl fs.mount-max; mount(2) fails with ENOSPC).
	ErrTableFull = errors.New("mount table full (sysctl fs.mount-max)")
)

// Info is one line of /proc/self/mountinfo.
type Info struct {
	ID, ParentID int
	Major, Minor uint32
	Root         string   // root of the mount within the filesystem
	MountPoint   string   // unescaped
	Options      []string // per-mount options (ro, nosuid, ...)
	FSType       string
	Source       string   // mount source (e.g. /dev/loop3)
	SuperOptions []string // per-superblock options (ro when the fs was remounted ro)
}

// ReadOnly reports whether the mount or its superblock is read-only.
func (i Info) ReadOnly() bool { return has(i.Options, "ro") || has(i.SuperOptions, "ro") }

func has(list []string, s string) bool {
	for _, o := range list {
		if o == s {
			return true
		}
	}
	return false
}

// Table is a parsed snapshot of the mount table.
type Table []Info

// Read parses the process's mountinfo (/proc/thread-self/mountinfo).
func Read() (Table, error) { return read() }

// Parse parses mountinfo text (exported for tests and fuzzing).
func Parse(data []byte) (Table, error) { return parse(data) }

// At returns the mounts whose mount point is path (after filepath.Clean),
// bottom-most first; empty when path is not a mount point.
func (t Table) At(path string) []Info { return t.at(path) }

// Top returns the uppermost mount at path (after filepath.Clean), the one
// a process opening path reaches; false when path is not a mount point.
func (t Table) Top(path string) (Info, bool) {
	ms := t.at(path)
	if len(ms) == 0 {
		return Info{}, false
	}
	return ms[len(ms)-1], true
}

// Lookup returns the top mount at path as the kernel shows it now, without
// reading the mount table (statx and statmount(2)); ok is false when
// nothing is mounted at path. Its Options and SuperOptions hold only "ro"
// or "rw". It fails with errors.ErrUnsupported on kernels before 6.8;
// callers then read the table.
func Lookup(path string) (i Info, ok bool, err error) { return lookup(path) }

// OfDevice returns every mount of the block device major:minor, including
// bind mounts of directories inside it.
func (t Table) OfDevice(major, minor uint32) []Info { return t.ofDevice(major, minor) }

// Under returns mount points at or below dir, deepest first (the order to
// unmount them in).
func (t Table) Under(dir string) []Info { return t.under(dir) }

// Mount mounts source at target as fstype with options in mount(8) form
// ("ro", "noatime", "nouuid", "discard", ...). Options that are mount(2)
// flags become flags; the rest is passed as filesystem data.
func Mount(source, target, fstype string, options []string) error {
	return mountFS(source, target, fstype, options)
}

// Bind bind-mounts source at target (a directory or a file, matching the
// source), then, when readOnly, remounts the bind read-only. Extra options
// (nosuid, nodev, noexec, noatime) are applied on that remount too; the
// source mount's ro, nosuid, nodev, noexec and nosymfollow are kept.
// Filesystem data options (discard, nouuid, ...) are ignored, as by
// mount(8): they belong to the source's mount. Bind does not check target
// first; a second call stacks a second mount (callers check At).
func Bind(source, target string, readOnly bool, options []string) error {
	return bind(source, target, readOnly, options)
}

// Unmount unmounts target once. A path that is not a mount point or does
// not exist is not an error (idempotent, CSI spec: unpublish/unstage MUST be
// idempotent).
func Unmount(target string) error { return unmount(target) }

// UnmountAll unmounts every mount stacked at target until none is left.
func UnmountAll(target string) error { return unmountAll(target) }

// SplitOptions separates mount(8)-style options into mount(2) flags and the
// filesystem data string. Unknown flags are data; malformed ones (empty,
// containing NUL or a comma) return ErrInvalidOption.
func SplitOptions(options []string) (flags uintptr, data string, err error) {
	return splitOptions(options)
}
