// Package procs is what the test harnesses of shared filesystems
// (internal/testutil/gluster, internal/testutil/ceph) do with the
// processes and network namespaces they start: each process is recorded
// with its start time, so that a later run, cleaning up after a killed
// one, kills exactly the processes that run started and never a process
// that reused a PID; namespaces are made and removed with `ip netns`, and
// the processes inside one are found from /proc; numbered slots (Slots)
// let several test processes each run a cluster at once. A cluster's
// simulated nodes (Nodes: each node's network, Bridge and Link, its FUSE
// client started with Spawn, the wait for its mount, WaitMounted) are
// here too, the same for every harness. Tests only.
package procs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// NetnsDir is where `ip netns` keeps its named namespaces.
const NetnsDir = "/run/netns"

// Record appends "PID STARTTIME NAME" to dir/pids; a process already gone
// is not recorded.
func Record(dir string, pid int, name string) {
	st, err := StartTime(pid)
	if err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "pids"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%d %d %s\n", pid, st, name)
}

// Recorded returns the PIDs recorded in dir/pids that still name the
// process recorded (same start time).
func Recorded(dir string) []int {
	f, err := os.Open(filepath.Join(dir, "pids"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var pids []int
	s := bufio.NewScanner(f)
	for s.Scan() {
		var pid int
		var st uint64
		if _, err := fmt.Sscan(s.Text(), &pid, &st); err != nil {
			continue
		}
		if now, err := StartTime(pid); err == nil && now == st {
			pids = append(pids, pid)
		}
	}
	return pids
}

// StartTime is field 22 of /proc/PID/stat (clock ticks since boot).
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("bad stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// InNetns lists the processes whose network namespace is the one bound
// at path (as `ip netns pids` does).
func InNetns(path string) []int {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillAndWait sends SIGKILL to pids and waits, for wait at most, until
// none is left but zombies.
func KillAndWait(pids []int, wait time.Duration) error {
	slices.Sort(pids)
	pids = slices.Compact(pids)
	for _, p := range pids {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	deadline := time.Now().Add(wait)
	for {
		var alive []int
		for _, p := range pids {
			if Running(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still running after SIGKILL", alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Running reports whether pid exists and is not a zombie.
func Running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}

// AddNetns makes the named network namespace.
func AddNetns(name string) error { return IP("netns", "add", name) }

// DelNetns deletes a named namespace; a missing one is not an error.
func DelNetns(name string) error {
	if _, err := os.Stat(filepath.Join(NetnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return IP("netns", "delete", name)
}

// IP runs ip(8) with args, its output in the error.
func IP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NotInstalled returns the programs of names that are not on PATH.
func NotInstalled(names ...string) []string {
	var absent []string
	for _, p := range names {
		if _, err := exec.LookPath(p); err != nil {
			absent = append(absent, p)
		}
	}
	return absent
}

// Tail returns the last n lines of a file, for failure messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return path + ":\n" + strings.Join(lines, "\n")
}
