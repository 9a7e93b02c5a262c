package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// loopNumbers lists the loop devices that exist (attached or not).
func loopNumbers() map[int]bool {
	out := map[int]bool{}
	names, _ := filepath.Glob("/sys/block/loop*")
	for _, p := range names {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "loop")); err == nil {
			out[n] = true
		}
	}
	return out
}

// removeNewLoops removes the loop devices that did not exist before the
// run (before) and are not attached now: the kernel makes a device for
// every LOOP_CTL_GET_FREE that finds none free and keeps it after its
// detach, so a run of 1,000 volumes would leave 1,000 empty devices for
// every later scan of /sys/block on the machine. The kernel refuses
// (EBUSY) to remove a device that is attached or open, whoever holds it.
// It returns how many it removed.
func removeNewLoops(before map[int]bool) int {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(ctl)
	removed := 0
	for n := range loopNumbers() {
		if before[n] {
			continue
		}
		if _, err := os.Stat("/sys/block/loop" + strconv.Itoa(n) + "/loop/backing_file"); !errors.Is(err, os.ErrNotExist) {
			continue // attached (or unreadable): not ours to remove
		}
		if err := unix.IoctlSetInt(ctl, unix.LOOP_CTL_REMOVE, n); err == nil {
			removed++
		}
	}
	return removed
}
