package loop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Holders says, for a person, what keeps the device at devPath open: its
// mounts in any mount namespace, the processes with a descriptor of it,
// and the devices stacked on it. A detach of a device held so only marks
// it (autoclear) and exits 0, and the device stays until the last holder
// lets go: a refusal that says only "still being detached" leaves the
// operator to find the holder alone. Only called on such a failure: it
// walks /proc.
func Holders(devPath string) string {
	var parts []string
	if m := strings.TrimPrefix(holders(devPath), "; "); m != "" && !strings.Contains(m, "mounted in no process") {
		parts = append(parts, m)
	}
	if o := openers(devPath); o != "" {
		parts = append(parts, o)
	}
	if s := stacked(devPath); s != "" {
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "nothing this host can see holds it (an exclusive opener that has gone, or a holder on another host)"
	}
	return strings.Join(parts, "; ")
}

// openers names the processes that have the device open.
func openers(devPath string) string {
	var dev unix.Stat_t
	if err := unix.Stat(devPath, &dev); err != nil || dev.Mode&unix.S_IFMT != unix.S_IFBLK {
		return ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	seen := map[string]bool{}
	var names []string
	for _, fd := range fds {
		pid := strings.Split(fd, "/")[2]
		if seen[pid] {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != dev.Rdev {
			continue
		}
		seen[pid] = true
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		names = append(names, fmt.Sprintf("pid %s (%s)", pid, strings.TrimSpace(string(comm))))
	}
	return listed("open by", names)
}

// stacked names the devices built on this one (device-mapper, md, ...).
func stacked(devPath string) string {
	ents, _ := os.ReadDir(filepath.Join("/sys/block", filepath.Base(devPath), "holders"))
	var names []string
	for _, e := range ents {
		names = append(names, "/dev/"+e.Name())
	}
	return listed("held by the stacked device", names)
}

// listed is "what a, b, c and N more", or "" for none.
func listed(what string, names []string) string {
	if len(names) == 0 {
		return ""
	}
	more := ""
	if len(names) > maxHolders {
		more = fmt.Sprintf(" and %d more", len(names)-maxHolders)
		names = names[:maxHolders]
	}
	return what + " " + strings.Join(names, ", ") + more
}
