package fake

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// Table implements hostos.Mounter: a copy, so callers never see it change.
func (h *Host) Table() (mount.Table, error) {
	return call(h, "Table", "table", nil, func() (mount.Table, error) {
		return h.snapshot(), nil
	})
}

func (h *Host) snapshot() mount.Table {
	out := make(mount.Table, len(h.table))
	for i, m := range h.table {
		m.Options, m.SuperOptions = slices.Clone(m.Options), slices.Clone(m.SuperOptions)
		out[i] = m
	}
	return out
}

// perMount are the flags mountinfo shows per mount (field 6), in its order.
var perMount = []struct {
	flag uintptr
	name string
}{
	{unix.MS_NOSUID, "nosuid"}, {unix.MS_NODEV, "nodev"}, {unix.MS_NOEXEC, "noexec"},
	{unix.MS_NOATIME, "noatime"}, {unix.MS_NODIRATIME, "nodiratime"}, {unix.MS_RELATIME, "relatime"},
	{unix.MS_NOSYMFOLLOW, "nosymfollow"},
}

func mountOptions(flags uintptr) []string {
	out := []string{"rw"}
	if flags&unix.MS_RDONLY != 0 {
		out[0] = "ro"
	}
	for _, f := range perMount {
		if flags&f.flag != 0 {
			out = append(out, f.name)
		}
	}
	return out
}

// Mount implements hostos.Mounter. source is an attached loop device
// carrying fstype, or anything for a filesystem without a device (tmpfs).
func (h *Host) Mount(source, target, fstype string, options []string) error {
	return h.do("Mount", "mount", []any{source, target, fstype, options}, func() error {
		return h.mount(source, target, fstype, options)
	})
}

func (h *Host) mount(source, target, fstype string, options []string) error {
	flags, data, err := mount.SplitOptions(options)
	if err != nil {
		return err
	}
	target, err = mountPoint(target, true)
	if err != nil {
		return err
	}
	m := mount.Info{Root: "/", MountPoint: target, Options: mountOptions(flags), FSType: fstype, Source: source}
	ro := flags&unix.MS_RDONLY != 0
	if _, isLoop := devNumber(source); isLoop || slices.Contains(fs.Types, fstype) {
		d, err := h.blockDevice(source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", source, err)
		}
		f := h.fs[d.BackingFile]
		if f == nil || f.Type != fstype {
			return fmt.Errorf("mount %s as %s: wrong fs type, bad superblock: %w", source, fstype, unix.EINVAL)
		}
		if d.ReadOnly && !ro {
			return fmt.Errorf("mount %s read-write: device is write-protected: %w", source, unix.EACCES)
		}
		m.Major, m.Minor = loopMajor, uint32(d.Number)
		if f.Encrypt {
			h.keys.Encryptable(target)
		}
		if fstype == "btrfs" {
			// btrfs shows an anonymous device number, the same for every
			// mount of one superblock.
			m.Major, m.Minor = 0, h.anonMinor("btrfs:"+d.Path)
		}
	} else {
		m.Major, m.Minor = 0, h.anonMinor("") // every tmpfs mount is a new superblock
	}
	m.SuperOptions = []string{"rw"}
	if ro {
		m.SuperOptions[0] = "ro"
	}
	if data != "" {
		m.SuperOptions = append(m.SuperOptions, strings.Split(data, ",")...)
	}
	// A second mount of a superblock shares it, and its options.
	for _, o := range h.table {
		if o.Major == m.Major && o.Minor == m.Minor {
			m.SuperOptions = slices.Clone(o.SuperOptions)
			break
		}
	}
	h.add(m)
	return nil
}

// anonMinor returns the anonymous device of the superblock key names,
// a new one when none of its mounts is left ("" always a new one).
func (h *Host) anonMinor(key string) uint32 {
	if a, ok := h.anon[key]; ok && key != "" {
		for _, m := range h.table {
			if m.Major == 0 && m.Minor == a {
				return a
			}
		}
	}
	h.nextAnon++
	a := anonFirst + h.nextAnon
	h.anon[key] = a
	return a
}

// add puts m on top of whatever is mounted at its mount point, or below
// the mount holding that path.
func (h *Host) add(m mount.Info) {
	m.ID = h.nextID
	h.nextID++
	if top, ok := h.table.Top(m.MountPoint); ok {
		m.ParentID = top.ID
	} else {
		m.ParentID = h.holder(m.MountPoint).ID
	}
	h.table = append(h.table, m)
}

// holder is the uppermost mount whose mount point holds path (the root
// mount at least).
func (h *Host) holder(path string) mount.Info {
	best := h.table[0]
	for _, m := range h.table {
		if within(path, m.MountPoint) && len(m.MountPoint) >= len(best.MountPoint) {
			best = m
		}
	}
	return best
}

func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// mountPoint checks target exists on disk as a directory (dir) or not,
// and returns it as mountinfo names it.
func mountPoint(target string, dir bool) (string, error) {
	st, err := os.Stat(target)
	switch {
	case err != nil:
		return "", fmt.Errorf("mount point %s: %w", target, err)
	case dir && !st.IsDir():
		return "", fmt.Errorf("mount point %s: %w", target, unix.ENOTDIR)
	case !dir && st.IsDir():
		return "", fmt.Errorf("mount point %s is a directory, the source is not: %w", target, unix.ENOTDIR)
	}
	return resolve(target), nil
}

// Bind implements hostos.Mounter: a bind of a device node (/dev/loopN) or
// of a directory, which belongs to the mount holding it. A source named
// /proc/self/fd/N (a directory volume's, opened beneath its pool) is
// resolved to the path the descriptor is open on, so the mount's root is
// that directory's, as the kernel shows it.
func (h *Host) Bind(source, target string, readOnly bool, options []string) error {
	return h.do("Bind", "bind", []any{source, target, fmt.Sprintf("ro=%v", readOnly), options}, func() error {
		return h.bind(source, target, readOnly, options)
	})
}

func (h *Host) bind(source, target string, readOnly bool, options []string) error {
	flags, _, err := mount.SplitOptions(options)
	if err != nil {
		return err
	}
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	var m mount.Info
	if _, isLoop := devNumber(source); isLoop {
		d, err := h.device(source)
		if err != nil {
			return fmt.Errorf("bind %s: %w", source, unix.ENOENT)
		}
		if target, err = mountPoint(target, false); err != nil {
			return err
		}
		m = mount.Info{Major: 0, Minor: devtmpfsMinor, Root: "/" + filepath.Base(d.Path), MountPoint: target,
			FSType: "devtmpfs", Source: "udev", SuperOptions: []string{"rw", "size=4096k", "mode=755"}}
	} else {
		st, err := os.Stat(source)
		if err != nil {
			return fmt.Errorf("bind %s: %w", source, err)
		}
		if target, err = mountPoint(target, st.IsDir()); err != nil {
			return err
		}
		source = resolve(source)
		from := h.holder(source)
		rel, _ := filepath.Rel(from.MountPoint, source)
		m = from
		m.Root = filepath.Join(from.Root, rel)
		m.MountPoint = target
		m.SuperOptions = slices.Clone(from.SuperOptions)
		// The source mount's restrictions are kept (see mount.Bind).
		for _, o := range []struct {
			name string
			flag uintptr
		}{{"ro", unix.MS_RDONLY}, {"nosuid", unix.MS_NOSUID}, {"nodev", unix.MS_NODEV},
			{"noexec", unix.MS_NOEXEC}, {"nosymfollow", unix.MS_NOSYMFOLLOW}} {
			if slices.Contains(from.Options, o.name) {
				flags |= o.flag
			}
		}
	}
	m.Options = mountOptions(flags)
	h.add(m)
	return nil
}

// UnmountAll implements hostos.Mounter.
func (h *Host) UnmountAll(target string) error {
	return h.do("UnmountAll", "unmount", []any{target}, func() error {
		path := resolve(target)
		for {
			top, ok := h.table.Top(path)
			if !ok || top.ID == rootMountID {
				return nil
			}
			for _, m := range h.table {
				if m.ParentID == top.ID && m.ID != top.ID {
					return fmt.Errorf("unmount %s: %s is mounted below it: %w", target, m.MountPoint, unix.EBUSY)
				}
			}
			h.table = slices.DeleteFunc(h.table, func(m mount.Info) bool { return m.ID == top.ID })
		}
	})
}

// fsMounted reports whether d's filesystem is mounted (a device bind does
// not count: it does not hold the device).
func (h *Host) fsMounted(d loop.Device) bool {
	return len(h.mountsOf(d)) > 0
}

func (h *Host) mountsOf(d loop.Device) []mount.Info {
	var out []mount.Info
	for _, m := range h.table {
		if m.FSType != "devtmpfs" && ((m.Major == d.Major && m.Minor == d.Minor) || m.Source == d.Path) {
			out = append(out, m)
		}
	}
	return out
}

// MountAt adds a mount of a filesystem filevol does not own (a tmpfs) at
// target, as another program on the node would: a test's occupied path.
func (h *Host) MountAt(target, fstype, source string) error {
	return h.Mount(source, target, fstype, nil)
}

// RemountReadOnly does what the kernel does to a filesystem after I/O
// errors (errors=remount-ro): every mount of the superblock at mountPoint
// shows ro in its superblock options.
func (h *Host) RemountReadOnly(mountPoint string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	top, ok := h.table.Top(mountPoint)
	if !ok {
		return fmt.Errorf("%s: %w", mountPoint, mount.ErrNotMounted)
	}
	h.log = append(h.log, "kernel-remount-ro "+mountPoint)
	for i, m := range h.table {
		if m.Major == top.Major && m.Minor == top.Minor {
			h.table[i].SuperOptions = append([]string{"ro"}, slices.DeleteFunc(slices.Clone(m.SuperOptions),
				func(o string) bool { return o == "rw" || o == "ro" })...)
		}
	}
	return nil
}

// Lookup implements hostos.Mounter: the top mount at path, with only the
// ro or rw of its options, as the kernel's statmount answers it.
func (h *Host) Lookup(path string) (mount.Info, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin("Lookup", "lookup", path); err != nil {
		return mount.Info{}, false, err
	}
	m, ok := h.snapshot().Top(path)
	if !ok {
		return mount.Info{}, false, nil
	}
	m.Options, m.SuperOptions = roOrRW(m.Options), roOrRW(m.SuperOptions)
	return m, true, nil
}

func roOrRW(options []string) []string {
	if slices.Contains(options, "ro") {
		return []string{"ro"}
	}
	return []string{"rw"}
}
