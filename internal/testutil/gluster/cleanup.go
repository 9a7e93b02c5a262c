package gluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/procs"
)

// teardown removes the nodes, kills the server (SIGKILL to unshare, whose
// --kill-child takes the PID namespace's init, and with it glusterd and the
// brick), deletes the server's namespace and the slot's directory, and
// releases the slot.
func (c *Cluster) teardown() error {
	var errs []error
	c.mu.Lock()
	nodes := make([]*node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n)
	}
	c.mu.Unlock()
	for _, n := range nodes {
		if err := c.removeNode(n); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.name, err))
		}
	}
	if c.server != nil && c.server.Process != nil {
		_ = c.server.Process.Signal(syscall.SIGKILL)
		select {
		case <-c.serverDone:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("server (pid %d) did not exit", c.server.Process.Pid))
		}
	}
	if err := cleanSlot(c.slot); err != nil {
		errs = append(errs, err)
	}
	_ = c.lock.Close()
	return errors.Join(errs...)
}

// takeSlot sweeps every slot whose lock is free (cleaning what a killed run
// left there) and keeps the first one, locked.
func takeSlot(t testing.TB) (int, *os.File, error) {
	if err := os.MkdirAll(Base, 0o755); err != nil {
		return 0, nil, err
	}
	kept := -1
	var keptLock *os.File
	for slot := range maxSlots {
		lockPath := filepath.Join(Base, fmt.Sprintf("slot-%d.lock", slot))
		f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return 0, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // a live process holds it
			continue
		}
		if err := cleanSlot(slot); err != nil {
			t.Logf("gluster: cleaning slot %d left by an earlier run: %v", slot, err)
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

// cleanSlot removes whatever slot's owner left: the processes in its
// namespaces and those it recorded (checked by start time, so a reused PID
// is left alone), its mounts and loop devices under /tmp/fvgl/N, the
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
	if err := procs.KillAndWait(pids, 5*time.Second); err != nil {
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
