package ceph

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

	"github.com/filevol/filevol/internal/testutil"
)

// teardown stops the nodes and daemons, deletes the namespaces and the
// slot's directory, and releases the slot.
func (c *Cluster) teardown(logf func(string, ...any)) error {
	start := time.Now()
	errs := []error{c.stopAll()}
	if err := cleanSlot(c.slot); err != nil {
		errs = append(errs, err)
	}
	_ = c.lock.Close()
	logf("ceph: slot %d torn down in %v", c.slot, time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}

// takeSlot sweeps every slot whose lock is free (cleaning what a killed run
// left there) and keeps the first one, locked.
func takeSlot(logf func(string, ...any)) (int, *os.File, error) {
	if err := os.MkdirAll(Base, 0o755); err != nil {
		return 0, nil, err
	}
	kept := -1
	var keptLock *os.File
	for slot := range maxSlots {
		f, err := os.OpenFile(filepath.Join(Base, fmt.Sprintf("slot-%d.lock", slot)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return 0, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // a live process holds it
			continue
		}
		if err := cleanSlot(slot); err != nil {
			logf("ceph: cleaning slot %d left by an earlier run: %v", slot, err)
			f.Close()
			continue
		}
		if kept < 0 {
			kept, keptLock = slot, f
		} else {
			f.Close()
		}
	}
	if kept < 0 {
		return 0, nil, fmt.Errorf("no free slot of %d under %s", maxSlots, Base)
	}
	return kept, keptLock, nil
}

// cleanSlot removes whatever slot's owner left: the processes it recorded
// (checked by start time, so a reused PID is left alone) and those in its
// namespaces, its mounts and loop devices under its directory, the
// directory and its namespaces. The caller holds the slot's lock.
func cleanSlot(slot int) error {
	dir := filepath.Join(Base, strconv.Itoa(slot))
	nsPrefix := fmt.Sprintf("%s%d-", Prefix, slot)
	var nss []string
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), nsPrefix) {
				nss = append(nss, e.Name())
			}
		}
	}
	pids := recordedPIDs(dir)
	for _, ns := range nss {
		pids = append(pids, pidsInNetns(filepath.Join(netnsDir, ns))...)
	}
	var errs []error
	// The mounts first: a ceph-fuse killed before its mount leaves a dead
	// mount, one alive ends when it is unmounted.
	if _, err := os.Stat(dir); err == nil {
		if err := testutil.CleanLeftovers(filepath.Join(dir, "mnt")); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killAndWait(pids); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(dir); err == nil {
		if err := testutil.CleanLeftovers(dir); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range nss {
		if err := delNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// recordPID appends "PID STARTTIME NAME" to dir/pids.
func recordPID(dir string, pid int, name string) {
	st, err := startTime(pid)
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

// recordedPIDs returns the recorded PIDs that still name the same process.
func recordedPIDs(dir string) []int {
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
		if now, err := startTime(pid); err == nil && now == st {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startTime is field 22 of /proc/PID/stat (clock ticks since boot).
func startTime(pid int) (uint64, error) {
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

// pidsInNetns lists the processes whose network namespace is the one bound
// at path.
func pidsInNetns(path string) []int {
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

// killAndWait sends SIGKILL to pids and waits (10 s at most) until none is
// left but zombies.
func killAndWait(pids []int) error {
	slices.Sort(pids)
	pids = slices.Compact(pids)
	for _, p := range pids {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var alive []int
		for _, p := range pids {
			if running(p) {
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

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}

func addNetns(name string) error { return ipRun("netns", "add", name) }

// delNetns deletes a named namespace; a missing one is not an error.
func delNetns(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return ipRun("netns", "delete", name)
}

func ipRun(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
