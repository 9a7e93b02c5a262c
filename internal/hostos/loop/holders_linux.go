package loop

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxHolders bounds how many holding namespaces a message names.
const maxHolders = 3

// holders says where the device at devPath is mounted, for an EBUSY that
// would otherwise leave the operator guessing: in this mount namespace (the
// caller's own unmount was missed), in another one (whose process it
// names), or nowhere any process can see (an exclusive opener such as
// mkfs, or a namespace pinned by a bind mount with no process in it). It
// reads every task's namespace, not only every process's: a thread can
// unshare its own. Only called on a failure, so its cost (a walk of /proc)
// is paid rarely.
func holders(devPath string) string {
	var st unix.Stat_t
	if err := unix.Stat(devPath, &st); err != nil {
		return ""
	}
	want := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	self, _ := os.Readlink("/proc/thread-self/ns/mnt")
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*")
	seen := map[string]bool{}
	var here, there []string
	for _, task := range tasks {
		ns, err := os.Readlink(task + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		at := mountedAt(task+"/mountinfo", want, devPath)
		if at == "" {
			continue
		}
		if ns == self {
			here = append(here, at)
			continue
		}
		pid := strings.Split(task, "/")[2]
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		there = append(there, fmt.Sprintf("pid %s (%s) at %s", pid, strings.TrimSpace(string(comm)), at))
	}
	switch {
	case len(here) > 0:
		return fmt.Sprintf("; device %s is %s at %s", want, MountedHere, strings.Join(here, ", "))
	case len(there) > 0:
		more := ""
		if len(there) > maxHolders {
			more = fmt.Sprintf(" and %d more", len(there)-maxHolders)
			there = there[:maxHolders]
		}
		return fmt.Sprintf("; %s only, device %s: %s%s", ForeignMount, want, strings.Join(there, "; "), more)
	}
	return fmt.Sprintf("; device %s is mounted in no process's mount namespace", want)
}

// mountedAt returns the first mount point of device majMin ("7:3") or
// source devPath in a mountinfo file, or "". Both: btrfs shows an
// anonymous device number there, not its block device's, which only its
// source names.
func mountedAt(mountinfo, majMin, devPath string) string {
	f, err := os.Open(mountinfo)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID parent major:minor root mountpoint ...
		line := sc.Text()
		fields := strings.SplitN(line, " ", 6)
		_, tail, _ := strings.Cut(line, " - ") // fstype source superoptions
		if len(fields) >= 5 && (fields[2] == majMin || sourceIs(tail, devPath)) {
			if p, err := strconv.Unquote(`"` + fields[4] + `"`); err == nil {
				return p
			}
			return fields[4]
		}
	}
	return ""
}

// sourceIs reports whether the "fstype source superoptions" tail of a
// mountinfo line has source dev.
func sourceIs(tail, dev string) bool {
	f := strings.Fields(tail)
	return len(f) >= 2 && f[1] == dev
}
