package mount

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// readMountInfo reads a mountinfo file whole, then parses it.
func readMountInfo(path string) (Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return parse(data)
}

// parse parses mountinfo text as described in proc_pid_mountinfo(5):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Empty lines are skipped; any other malformed line fails the whole parse,
// so a caller never acts on half a table.
func parse(data []byte) (Table, error) {
	var t Table
	for n := 1; len(data) > 0; n++ {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if len(line) == 0 {
			continue
		}
		info, err := parseLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		t = append(t, info)
	}
	return t, nil
}

func parseLine(line string) (Info, error) {
	// Fields are separated by exactly one space. The kernel escapes spaces
	// inside fields, so splitting is safe, and an empty field (a mount
	// whose source is "") stays an empty field instead of shifting the rest.
	f := strings.Split(line, " ")
	// The separator "-" can only come after the six fixed fields; no
	// optional field (shared:N, master:N, propagate_from:N, unbindable)
	// is "-", so the first one found is the separator.
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 {
		return Info{}, fmt.Errorf("no \"-\" separator after six fields")
	}
	if len(f)-sep-1 != 3 {
		return Info{}, fmt.Errorf("want 3 fields after \"-\", have %d", len(f)-sep-1)
	}
	var (
		info Info
		err  error
	)
	if info.ID, err = parseID(f[0]); err != nil {
		return Info{}, fmt.Errorf("mount ID: %w", err)
	}
	if info.ParentID, err = parseID(f[1]); err != nil {
		return Info{}, fmt.Errorf("parent ID: %w", err)
	}
	if info.Major, info.Minor, err = parseDev(f[2]); err != nil {
		return Info{}, err
	}
	if info.Root, err = unescape(f[3]); err != nil {
		return Info{}, fmt.Errorf("root: %w", err)
	}
	if info.MountPoint, err = unescape(f[4]); err != nil {
		return Info{}, fmt.Errorf("mount point: %w", err)
	}
	if info.MountPoint == "" || info.Root == "" {
		return Info{}, fmt.Errorf("empty root or mount point")
	}
	if info.Options, err = splitList(f[5]); err != nil {
		return Info{}, fmt.Errorf("mount options: %w", err)
	}
	if info.FSType, err = unescape(f[sep+1]); err != nil {
		return Info{}, fmt.Errorf("fstype: %w", err)
	}
	if info.FSType == "" {
		return Info{}, fmt.Errorf("empty fstype")
	}
	if info.Source, err = unescape(f[sep+2]); err != nil {
		return Info{}, fmt.Errorf("source: %w", err)
	}
	if info.SuperOptions, err = splitList(f[sep+3]); err != nil {
		return Info{}, fmt.Errorf("super options: %w", err)
	}
	return info, nil
}

// parseID parses a mount ID; bitSize 31 keeps it inside int on every arch.
func parseID(s string) (int, error) {
	v, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("%q is not a mount ID", s)
	}
	return int(v), nil
}

func parseDev(s string) (major, minor uint32, err error) {
	ma, mi, ok := strings.Cut(s, ":")
	a, errA := strconv.ParseUint(ma, 10, 32)
	b, errB := strconv.ParseUint(mi, 10, 32)
	if !ok || errA != nil || errB != nil {
		return 0, 0, fmt.Errorf("%q is not major:minor", s)
	}
	return uint32(a), uint32(b), nil
}

// splitList splits a comma-separated option field. The kernel escapes a
// comma inside an option value (seq_show_option), so unescaping comes after
// splitting.
func splitList(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := unescape(p)
		if err != nil {
			return nil, err
		}
		parts[i] = u
	}
	return parts, nil
}

// unescape reverses the kernel's mangling of mountinfo fields: a byte from
// the escape set (space, tab, newline, backslash, and comma in options) is
// written as a backslash and three octal digits. The kernel always escapes
// the backslash itself, so any other use of one means a malformed line.
func unescape(s string) (string, error) {
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for ; i >= 0; i = strings.IndexByte(s, '\\') {
		b.WriteString(s[:i])
		if len(s) < i+4 || !isOctal(s[i+1]) || !isOctal(s[i+2]) || !isOctal(s[i+3]) {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
		if s[i+1] > '3' || v == 0 {
			// Over 0377 does not fit a byte; NUL cannot be in a path.
			return "", fmt.Errorf("bad escape in %q", s)
		}
		b.WriteByte(v)
		s = s[i+4:]
	}
	b.WriteString(s)
	return b.String(), nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func (t Table) at(path string) []Info {
	path = filepath.Clean(path)
	var found []Info
	for _, i := range t {
		if i.MountPoint == path {
			found = append(found, i)
		}
	}
	return stackOrder(found)
}

// stackOrder orders mounts sharing one mount point bottom-most first. Each
// mount stacked on top has the one below as its parent; following that
// chain is right even where file order is not (MOVE_MOUNT_BENEATH puts a
// newer mount under an older one). What the chain does not explain (a
// cycle in fuzzed input) keeps file order at the end.
func stackOrder(found []Info) []Info {
	if len(found) < 2 {
		return found
	}
	rest := append([]Info(nil), found...)
	out := make([]Info, 0, len(found))
	for len(rest) > 0 {
		next := -1
		for i, c := range rest {
			if !hasID(rest, c.ParentID) || c.ParentID == c.ID {
				next = i
				break
			}
		}
		if next < 0 {
			return append(out, rest...)
		}
		out = append(out, rest[next])
		rest = append(rest[:next], rest[next+1:]...)
	}
	return out
}

func hasID(list []Info, id int) bool {
	for _, i := range list {
		if i.ID == id {
			return true
		}
	}
	return false
}

func (t Table) ofDevice(major, minor uint32) []Info {
	var found []Info
	for _, i := range t {
		if i.Major == major && i.Minor == minor {
			found = append(found, i)
		}
	}
	return found
}

func (t Table) under(dir string) []Info {
	dir = filepath.Clean(dir)
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	var found []Info
	// Walk backwards so that, at equal depth, later (upper) mounts come
	// first; the stable sort keeps that.
	for k := len(t) - 1; k >= 0; k-- {
		if mp := t[k].MountPoint; mp == dir || strings.HasPrefix(mp, prefix) {
			found = append(found, t[k])
		}
	}
	sort.SliceStable(found, func(a, b int) bool {
		return depth(found[a].MountPoint) > depth(found[b].MountPoint)
	})
	return found
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
