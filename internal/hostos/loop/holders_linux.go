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

// ForeignMount marks a busy error whose device is mounted only in mount
// namespaces other than the caller's: typically a copy of the host's mount
// table that another program's new namespace (a container's, a test
// server's) still holds. The caller's own unmount cannot release it; the
// device frees when that program drops its copy.
const ForeignMount = "mounted in another mount namespace"

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
		at := mountedAt(task+"/mountinfo", want)
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
		return fmt.Sprintf("; device %s is mounted in this mount namespace at %s", want, strings.Join(here, ", "))
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

// mountedAt returns the first mount point of device majMin ("7:3") in a
// mountinfo file, or "".
func mountedAt(mountinfo, majMin string) string {
	f, err := os.Open(mountinfo)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID parent major:minor root mountpoint ...
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) >= 5 && fields[2] == majMin {
			if p, err := strconv.Unquote(`"` + fields[4] + `"`); err == nil {
				return p
			}
			return fields[4]
		}
	}
	return ""
}
