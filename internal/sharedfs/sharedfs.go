// Package sharedfs owns what filevol requires of the filesystem that holds
// a shared pool (--pool-shared: a directory every node mounts) and checks
// it from the client's side. It keeps one profile per kind of filesystem:
//
//   - local: a filesystem of this kernel (ext4, xfs, btrfs, tmpfs, ... on a
//     block device or in memory), as tests share one pool among several
//     node processes of one host. The kernel holds every lock: nothing to
//     check.
//   - GlusterFS (a FUSE mount, mountinfo type fuse.glusterfs): fencing and
//     coherence hold only with client.strict-locks on in every client,
//     performance.stat-prefetch (md-cache) and performance.quick-read off,
//     and the FUSE client mounted with entry-timeout=0 and
//     attribute-timeout=0 (docs/shared-pools-glusterfs.md). Each is read
//     from the client's own view of itself, under <mount>/.meta.
//   - CephFS through ceph-fuse (mountinfo type fuse.ceph-fuse): coherence
//     holds only with the client's page cache off (fuse_disable_pagecache
//     true, docs/shared-pools-cephfs.md), read as the client runs it from
//     its admin socket, found by the mount's ceph.client_id.
//   - other: any other network or FUSE filesystem (NFS, the kernel's
//     CephFS client, SMB, ...),
//     or one not recognised. Nothing is checked, and nothing is refused:
//     the report carries a warning that filevol guarantees nothing there
//     (its fencing is the filesystem's lock recovery, never tried on it).
//
// The kind is told from the mount table (/proc/self/mountinfo, through
// internal/hostos/mount: the mount whose ID statx gives for the directory)
// and statfs. Check returns what it found and one *Unmet error per
// requirement missing, each naming the setting and the exact fix; the
// caller decides (internal/app refuses to start unless
// --shared-pool-unsafe-allow names the setting). It runs no programs and
// changes nothing.
package sharedfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// Kind is a kind of shared filesystem, one profile each.
type Kind string

// The kinds.
const (
	KindLocal     Kind = "local"
	KindGlusterFS Kind = "glusterfs"
	KindCephFS    Kind = "cephfs"
	KindOther     Kind = "other"
)

// The settings a profile checks, by the names --shared-pool-unsafe-allow
// takes.
const (
	// SettingStrictLocks is GlusterFS's client.strict-locks, on in every
	// client translator.
	SettingStrictLocks = "strict-locks"
	// SettingStatPrefetch is GlusterFS's performance.stat-prefetch (the
	// md-cache translator), off.
	SettingStatPrefetch = "stat-prefetch"
	// SettingQuickRead is GlusterFS's performance.quick-read, off.
	SettingQuickRead = "quick-read"
	// SettingEntryTimeout is the FUSE client's entry-timeout, 0.
	SettingEntryTimeout = "entry-timeout"
	// SettingAttributeTimeout is the FUSE client's attribute-timeout, 0.
	SettingAttributeTimeout = "attribute-timeout"
	// SettingFuseDisablePagecache is ceph-fuse's fuse_disable_pagecache,
	// true.
	SettingFuseDisablePagecache = "fuse-disable-pagecache"
)

// Settings lists every setting any profile checks, in the order reported.
func Settings() []string { return append(GlusterFSSettings(), CephSettings()...) }

// GlusterFSSettings are the settings the GlusterFS profile checks.
func GlusterFSSettings() []string {
	return []string{SettingStrictLocks, SettingStatPrefetch, SettingQuickRead, SettingEntryTimeout, SettingAttributeTimeout}
}

// Options tell Check where to look.
type Options struct {
	// CephSocketDirs are where ceph-fuse clients' admin sockets are
	// looked for (*.asok); DefaultCephSocketDirs when empty.
	CephSocketDirs []string
}

// Report is what Check found.
type Report struct {
	// Dir is the directory checked; Path the existing directory it was
	// told by (Dir itself, or its nearest existing ancestor).
	Dir, Path string
	Kind      Kind
	// FSType, Source, MountPoint and Root are the mount's, as the mount
	// table shows them (empty when it was told by statfs alone).
	FSType, Source, MountPoint, Root string
	// Magic is statfs's f_type.
	Magic int64
	// Volume is a GlusterFS volume's name (from the mount source).
	Volume string
	// Found lists each setting checked with the value found ("" when it
	// could not be read), in the order of Settings.
	Found []Found
	// Warnings say what is not checked and why (kind other).
	Warnings []string
	// Transport is whether the client's I/O path shows TLS (GlusterFS
	// only: transport.go); TransportFrom says where it was read, or why
	// not. Reported, and required by --shared-pool-require=tls only.
	Transport     Transport
	TransportFrom string
}

// Found is one setting as read.
type Found struct {
	Setting, Value, Want string
	OK                   bool
}

// Unmet is a requirement not met, or one that could not be read.
type Unmet struct {
	Setting string
	// Want is the value required; Found the value read (with where it
	// was read), or why it could not be read.
	Want, Found string
	// Why is what goes wrong without it.
	Why string
	// Fix is the exact change that meets it.
	Fix string
}

// Error is Describe and the override that accepts the risk.
func (u *Unmet) Error() string {
	return fmt.Sprintf("%s; or accept the risk with --shared-pool-unsafe-allow=%s", u.Describe(), u.Setting)
}

// Describe says what is missing, why it matters and the fix.
func (u *Unmet) Describe() string {
	return fmt.Sprintf("%s: %s, want %s (%s); fix: %s", u.Setting, u.Found, u.Want, u.Why, u.Fix)
}

// Check tells the kind of the filesystem holding dir (or, while dir does
// not exist, its nearest existing ancestor) and checks that kind's
// profile. The error is nil when every requirement is met; otherwise it
// joins one *Unmet per requirement missing or unreadable (Unmets lists
// them). An error telling the filesystem is returned alone, with Kind
// empty.
func Check(dir string) (Report, error) { return CheckWith(dir, Options{}) }

// CheckWith is Check with Options.
func CheckWith(dir string, o Options) (Report, error) {
	r := Report{Dir: dir}
	path, err := existing(dir)
	if err != nil {
		return r, err
	}
	r.Path = path
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return r, fmt.Errorf("statfs %s: %w", path, err)
	}
	r.Magic = int64(st.Type)
	table, err := mount.Read()
	if err != nil {
		return r, err
	}
	var id uint64
	var idOK bool
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID, &sx); err == nil && sx.Mask&unix.STATX_MNT_ID != 0 {
		id, idOK = sx.Mnt_id, true
	}
	var fi unix.Stat_t
	if err := unix.Stat(path, &fi); err != nil {
		return r, fmt.Errorf("stat %s: %w", path, err)
	}
	m, ok := mountOf(table, path, id, idOK, unix.Major(fi.Dev), unix.Minor(fi.Dev))
	if ok {
		r.FSType, r.Source, r.MountPoint, r.Root = m.FSType, m.Source, m.MountPoint, m.Root
	}
	dirs := o.CephSocketDirs
	if len(dirs) == 0 {
		dirs = DefaultCephSocketDirs
	}
	unmet := check(&r, table, m, ok, env{open: os.DirFS, ceph: realCephEnv(dirs)})
	return r, joinUnmet(unmet)
}

// Unmets returns the requirements an error of Check names.
func Unmets(err error) []*Unmet {
	var out []*Unmet
	var walk func(error)
	walk = func(e error) {
		if u, ok := e.(*Unmet); ok {
			out = append(out, u)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		} else if x := errors.Unwrap(e); x != nil {
			walk(x)
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// Allow splits an error of Check by the settings an operator accepted
// (--shared-pool-unsafe-allow): the unmet requirements allow names come
// back as allowed, the rest as the error. An error that names no
// requirement (the filesystem could not be told) stays an error.
func Allow(err error, allow []string) (allowed []*Unmet, rest error) {
	if err == nil {
		return nil, nil
	}
	us := Unmets(err)
	if len(us) == 0 {
		return nil, err
	}
	var refused []*Unmet
	for _, u := range us {
		if slices.Contains(allow, u.Setting) {
			allowed = append(allowed, u)
		} else {
			refused = append(refused, u)
		}
	}
	return allowed, joinUnmet(refused)
}

func joinUnmet(us []*Unmet) error {
	if len(us) == 0 {
		return nil
	}
	errs := make([]error, len(us))
	for i, u := range us {
		errs[i] = u
	}
	return errors.Join(errs...)
}

// String is a one-line summary for logs and the node view.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", r.Dir, r.Kind)
	if r.FSType != "" {
		fmt.Fprintf(&b, " (%s %s at %s)", r.FSType, r.Source, r.MountPoint)
	} else {
		fmt.Fprintf(&b, " (statfs type %#x)", r.Magic)
	}
	for _, f := range r.Found {
		fmt.Fprintf(&b, " %s=%s", f.Setting, f.Value)
	}
	if r.Transport != TransportUnknown {
		fmt.Fprintf(&b, " transport=%s", r.Transport)
	}
	return b.String()
}

// existing returns dir with its symbolic links resolved, or its nearest
// existing ancestor's while it does not exist (pool.Open makes it).
func existing(dir string) (string, error) {
	p := filepath.Clean(dir)
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return real, nil
		}
		if !errors.Is(err, os.ErrNotExist) || p == filepath.Dir(p) {
			return "", fmt.Errorf("shared pool %s: %w", dir, err)
		}
		p = filepath.Dir(p)
	}
}

// mountOf finds the mount holding path: by the mount ID statx gave, else
// the uppermost mount of its device whose mount point is path or an
// ancestor of it, deepest first.
func mountOf(t mount.Table, path string, id uint64, idOK bool, major, minor uint32) (mount.Info, bool) {
	if idOK {
		for _, m := range t {
			if uint64(m.ID) == id {
				return m, true
			}
		}
	}
	var best mount.Info
	found := false
	for _, m := range t {
		if m.Major != major || m.Minor != minor || !within(path, m.MountPoint) {
			continue
		}
		// Later lines are mounted later: on an equal mount point the
		// later one is on top.
		if !found || len(m.MountPoint) >= len(best.MountPoint) {
			best, found = m, true
		}
	}
	return best, found
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}
