package sharedfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// What a GlusterFS FUSE client shows of itself, under the volume's root
// (its meta translator, loaded by every FUSE mount; GlusterFS 10.3 here):
//
//   - .meta/graphs/active/volfile: the client graph in use, one
//     "volume NAME / type TYPE / option KEY VALUE / end-volume" block per
//     translator. md-cache (performance.stat-prefetch) and quick-read
//     (performance.quick-read) are translators there when on, absent
//     when off. A `gluster volume set` reaches it at once (a new graph).
//   - .meta/graphs/active/<volume>-client-N/options/strict-locks: "on" or
//     "off", per client translator (one per brick), as the graph was
//     built. A `gluster volume set` of client.strict-locks alone makes no
//     new graph: running clients take it in place (their log says "option
//     strict-locks using set value on") and .meta keeps showing the value
//     they were built with, until the next new graph (a remount, or a
//     change that adds or removes a translator). Nothing else a client
//     shows holds the live value (its private dump has no strict_locks),
//     so a change on running clients is seen only after a remount: one
//     that turns it on is refused until then, one that turns it off is
//     not seen. The fix says to remount.
//   - .meta/root/private: the FUSE translator's state, with the effective
//     "entry_timeout = 0.000000" and "attribute_timeout = ..." (seconds;
//     1 when the mount did not set them). .meta/root/options/entry-timeout
//     and attribute-timeout exist only when the mount set them.
//
// .meta exists only at the volume's root: a mount of a subdirectory (a
// bind, a container's hostPath below the mount) does not reach it; then
// another mount of the same volume's root in the table is read, if any.
const (
	metaGraph   = ".meta/graphs/active"
	metaVolfile = metaGraph + "/volfile"
	metaPrivate = ".meta/root/private"
	metaOptions = ".meta/root/options"
)

// glusterDefaultTimeout is the FUSE client's entry and attribute timeout
// when its mount sets none (seconds).
const glusterDefaultTimeout = "1"

func checkGlusterFS(r *Report, t mount.Table, m mount.Info, open func(string) fs.FS) []*Unmet {
	r.Volume = volumeOf(m.Source)
	root, err := volumeRoot(t, m)
	var fsys fs.FS
	if err == nil {
		fsys = open(root)
	} else {
		root = m.MountPoint
	}
	r.Transport, r.TransportFrom = glusterTransport(fsys, root)
	return glusterSettings(r, fsys, err, root)
}

// volumeOf is the volume name of a mount source "server:vol" or
// "server:/vol".
func volumeOf(source string) string {
	if i := strings.LastIndexByte(source, ':'); i >= 0 {
		return strings.TrimPrefix(source[i+1:], "/")
	}
	return ""
}

// volumeRoot is where the volume's root is mounted in this mount
// namespace: m's mount point when m mounts the root, else another mount
// of the same filesystem that does.
func volumeRoot(t mount.Table, m mount.Info) (string, error) {
	if m.Root == "/" {
		return m.MountPoint, nil
	}
	for _, o := range t {
		if o.Major == m.Major && o.Minor == m.Minor && o.Root == "/" {
			return o.MountPoint, nil
		}
	}
	return "", fmt.Errorf("%s mounts the volume's subdirectory %s, and nothing in this mount namespace mounts its root, where the client shows its settings (.meta): mount the volume's root (the pool may be a directory in it)",
		m.MountPoint, m.Root)
}

// glusterSettings reads the settings from fsys, the volume's root as
// mounted at mnt (nil, with why, when it cannot be reached).
func glusterSettings(r *Report, fsys fs.FS, why error, mnt string) []*Unmet {
	vol := r.Volume
	if vol == "" {
		vol = "VOLUME"
	}
	setFix := func(key, value string) string { return fmt.Sprintf("gluster volume set %s %s %s", vol, key, value) }
	source := r.Source
	if source == "" {
		source = "SERVER:/" + vol
	}
	mountFix := fmt.Sprintf("mount the volume with entry-timeout=0,attribute-timeout=0 on every node (mount -t glusterfs -o entry-timeout=0,attribute-timeout=0 %s %s; "+
		"or glusterfs --entry-timeout=0 --attribute-timeout=0 ...), then restart filevol", source, mnt)
	reqs := []struct {
		setting, want, why, fix string
		read                    func() (string, bool, error)
	}{
		{SettingStrictLocks, "on",
			"without it a client that reconnects (a healed partition, a brick restart) reopens a locked image without its lock, and a cut-off node's buffered writes land in an image another node holds",
			setFix("client.strict-locks", "on") + ", then remount the volume on every node (a running client takes the option in place but shows the value it was mounted with, which is what filevol reads)", func() (string, bool, error) { return strictLocks(fsys, mnt) }},
		{SettingStatPrefetch, "off",
			"md-cache serves metadata up to 1 s old: a controller reads an attachment record another replica replaced",
			setFix("performance.stat-prefetch", "off"), func() (string, bool, error) { return translatorOff(fsys, mnt, "performance/md-cache") }},
		{SettingQuickRead, "off",
			"quick-read serves a small file's content cached by its mtime: a record rewritten by another node is read old",
			setFix("performance.quick-read", "off"), func() (string, bool, error) { return translatorOff(fsys, mnt, "performance/quick-read") }},
		{SettingEntryTimeout, "0",
			"the kernel keeps names for entry-timeout seconds: another node's rename (an attachment record replaced) is seen that late",
			mountFix, func() (string, bool, error) { return fuseTimeout(fsys, mnt, "entry") }},
		{SettingAttributeTimeout, "0",
			"the kernel keeps attributes (size, mtime) for attribute-timeout seconds: another node's change is seen that late",
			mountFix, func() (string, bool, error) { return fuseTimeout(fsys, mnt, "attribute") }},
	}
	var unmet []*Unmet
	for _, q := range reqs {
		var found string
		var ok bool
		err := why
		if fsys != nil {
			found, ok, err = q.read()
		}
		if err != nil {
			found = "could not be read: " + err.Error()
			ok = false
			r.Found = append(r.Found, Found{Setting: q.setting, Want: q.want})
		} else {
			r.Found = append(r.Found, Found{Setting: q.setting, Value: firstWord(found), Want: q.want, OK: ok})
		}
		if !ok {
			unmet = append(unmet, &Unmet{Setting: q.setting, Want: q.want, Found: found, Why: q.why, Fix: q.fix})
		}
	}
	return unmet
}

func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i]
	}
	return s
}

// strictLocks reads strict-locks of every client translator; ok when all
// are on. found is "on", or "off in NAME, ..." with where it was read.
func strictLocks(fsys fs.FS, mnt string) (string, bool, error) {
	g, err := readVolfile(fsys)
	if err != nil {
		return "", false, err
	}
	var clients, off []string
	for _, x := range g {
		if x.typ != "protocol/client" {
			continue
		}
		clients = append(clients, x.name)
		opt := path.Join(metaGraph, x.name, "options", "strict-locks")
		v, err := fs.ReadFile(fsys, opt)
		var value, where string
		switch {
		case err == nil:
			value, where = strings.TrimSpace(string(v)), path.Join(mnt, opt)
		case errors.Is(err, fs.ErrNotExist):
			// Not in the translator's options: the volfile's, or unset
			// (GlusterFS's default, off).
			value, where = x.options["strict-locks"], path.Join(mnt, metaVolfile)
		default:
			return "", false, fmt.Errorf("%s: %w", path.Join(mnt, opt), err)
		}
		if !glusterBool(value) {
			if value == "" {
				value = "off (not set)"
			}
			off = append(off, fmt.Sprintf("%s in %s (%s)", value, x.name, where))
		}
	}
	if len(clients) == 0 {
		return "", false, fmt.Errorf("%s holds no client translator (type protocol/client)", path.Join(mnt, metaVolfile))
	}
	if len(off) > 0 {
		return strings.Join(off, ", "), false, nil
	}
	return fmt.Sprintf("on in %s (%s)", strings.Join(clients, ", "), path.Join(mnt, metaGraph, "*-client-*", "options", "strict-locks")), true, nil
}

// translatorOff: ok when the client graph holds no translator of typ.
func translatorOff(fsys fs.FS, mnt, typ string) (string, bool, error) {
	g, err := readVolfile(fsys)
	if err != nil {
		return "", false, err
	}
	for _, x := range g {
		if x.typ == typ {
			return fmt.Sprintf("on (translator %s, type %s, in %s)", x.name, typ, path.Join(mnt, metaVolfile)), false, nil
		}
	}
	return fmt.Sprintf("off (no %s in %s)", typ, path.Join(mnt, metaVolfile)), true, nil
}

// fuseTimeout reads the FUSE client's entry or attribute timeout: the
// effective value in .meta/root/private, else the mount's option, else
// the default when the options show the mount did not set it.
func fuseTimeout(fsys fs.FS, mnt, which string) (string, bool, error) {
	var value, where string
	if b, err := fs.ReadFile(fsys, metaPrivate); err == nil {
		if v, ok := privateField(b, which+"_timeout"); ok {
			value, where = v, path.Join(mnt, metaPrivate)
		}
	}
	if value == "" {
		opt := path.Join(metaOptions, which+"-timeout")
		b, err := fs.ReadFile(fsys, opt)
		switch {
		case err == nil:
			value, where = strings.TrimSpace(string(b)), path.Join(mnt, opt)
		case errors.Is(err, fs.ErrNotExist):
			if _, err := fs.Stat(fsys, metaOptions); err != nil {
				return "", false, fmt.Errorf("neither %s nor %s: %w", path.Join(mnt, metaPrivate), path.Join(mnt, metaOptions), err)
			}
			value, where = glusterDefaultTimeout, "not set at mount: GlusterFS's default"
		default:
			return "", false, fmt.Errorf("%s: %w", path.Join(mnt, opt), err)
		}
	}
	f, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return "", false, fmt.Errorf("%s: %q is not a number of seconds", where, value)
	}
	return fmt.Sprintf("%s s (%s)", strconv.FormatFloat(f, 'f', -1, 64), where), f == 0, nil
}

// privateField finds "key = value" in a translator's private dump.
func privateField(b []byte, key string) (string, bool) {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// glusterBool is GlusterFS's reading of a boolean option.
func glusterBool(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "yes", "true", "enable", "1":
		return true
	}
	return false
}

// xlator is one translator of a volfile.
type xlator struct {
	name, typ string
	options   map[string]string
}

func readVolfile(fsys fs.FS) ([]xlator, error) {
	b, err := fs.ReadFile(fsys, metaVolfile)
	if err != nil {
		return nil, err
	}
	return parseVolfile(b)
}

// parseVolfile parses a GlusterFS volume file:
//
//	volume fvgl-client-0
//	    type protocol/client
//	    option strict-locks on
//	end-volume
//
// '#' starts a comment; subvolumes lines are not kept.
func parseVolfile(b []byte) ([]xlator, error) {
	var out []xlator
	var cur *xlator
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(nil, 1<<20)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "volume":
			if cur != nil || len(f) != 2 {
				return nil, fmt.Errorf("volfile line %d: %q", n, line)
			}
			cur = &xlator{name: f[1], options: map[string]string{}}
		case "end-volume":
			if cur == nil {
				return nil, fmt.Errorf("volfile line %d: end-volume outside a volume", n)
			}
			out = append(out, *cur)
			cur = nil
		case "type":
			if cur == nil || len(f) != 2 {
				return nil, fmt.Errorf("volfile line %d: %q", n, line)
			}
			cur.typ = f[1]
		case "option":
			if cur == nil || len(f) < 2 {
				return nil, fmt.Errorf("volfile line %d: %q", n, line)
			}
			cur.options[f[1]] = strings.Join(f[2:], " ")
		default: // subvolumes, and whatever a later version adds
			if cur == nil {
				return nil, fmt.Errorf("volfile line %d: %q outside a volume", n, line)
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("volfile: volume %s has no end-volume", cur.name)
	}
	return out, nil
}
