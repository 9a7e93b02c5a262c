package mount

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// read returns this thread's mount table (the process's: filevol never
// unshares a thread's mount namespace), parsed by moby/sys/mountinfo.
//
// The file is read to its end. One read(2) is not the whole table: the
// kernel's seq_file hands out at most one buffer (a page) of lines per
// read, so a table longer than 4 KiB comes in several reads. Taking the
// first read for the whole table loses every mount after it, and a
// publish that does not see its own earlier bind mounts a second one.
// Since Linux 5.8 the kernel keeps a cursor in the namespace's mount list
// between reads, so a mount present all along is never skipped by reads
// in pieces, whatever other calls mount and unmount meanwhile.
func read() (Table, error) {
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return parseReader(bytes.NewReader(data))
}

// parse parses mountinfo text as described in proc_pid_mountinfo(5):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Empty lines are skipped (the kernel writes none; test input may). A
// malformed line fails the whole parse, so a caller never acts on half a
// table.
func parse(data []byte) (Table, error) {
	var kept [][]byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) > 0 {
			kept = append(kept, line)
		}
	}
	return parseReader(bytes.NewReader(bytes.Join(kept, []byte("\n"))))
}

func parseReader(r io.Reader) (Table, error) {
	infos, err := mountinfo.GetMountsFromReader(r, nil)
	if err != nil {
		return nil, fmt.Errorf("parse mount table: %w", err)
	}
	return fromLibrary(infos)
}

// fromLibrary maps the library's entries to Info. The library unescapes
// root, mount point, fstype and source; options are split at commas and
// kept as the kernel writes them (a comma inside a value stays \054):
// filevol only compares whole words such as ro. Entries the kernel never
// writes (no mount point, no fstype) fail the table.
func fromLibrary(infos []*mountinfo.Info) (Table, error) {
	t := make(Table, 0, len(infos))
	for _, i := range infos {
		if i.Mountpoint == "" || i.FSType == "" || i.Root == "" {
			return nil, fmt.Errorf("parse mount table: mount %d has an empty root, mount point or fstype", i.ID)
		}
		if i.Major < 0 || i.Minor < 0 || uint64(i.Major) > 1<<32-1 || uint64(i.Minor) > 1<<32-1 {
			return nil, fmt.Errorf("parse mount table: mount %d: device %d:%d out of range", i.ID, i.Major, i.Minor)
		}
		t = append(t, Info{
			ID: i.ID, ParentID: i.Parent, Major: uint32(i.Major), Minor: uint32(i.Minor),
			Root: i.Root, MountPoint: i.Mountpoint, Options: splitList(i.Options),
			FSType: i.FSType, Source: i.Source, SuperOptions: splitList(i.VFSOptions),
		})
	}
	return t, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

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
