package ceph

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/procs"
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
	if ents, err := os.ReadDir(procs.NetnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), nsPrefix) {
				nss = append(nss, e.Name())
			}
		}
	}
	pids := procs.Recorded(dir)
	for _, ns := range nss {
		pids = append(pids, procs.InNetns(filepath.Join(procs.NetnsDir, ns))...)
	}
	var errs []error
	// The mounts first: a ceph-fuse killed before its mount leaves a dead
	// mount, one alive ends when it is unmounted.
	if _, err := os.Stat(dir); err == nil {
		if err := testutil.CleanLeftovers(filepath.Join(dir, "mnt")); err != nil {
			errs = append(errs, err)
		}
	}
	if err := procs.KillAndWait(pids, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(dir); err == nil {
		if err := testutil.CleanLeftovers(dir); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range nss {
		if err := procs.DelNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
