package procs

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
)

// Slots are a harness's numbered places on the machine, so that several
// test processes can each run a cluster at once: slot N is the flock on
// Base/slot-N.lock, the directory Base/N and the network namespaces named
// NetnsPrefix+"N-"*. Whoever holds the lock owns the rest.
type Slots struct {
	Base        string
	Max         int
	NetnsPrefix string
	// KillWait bounds the wait for the slot's killed processes to go.
	KillWait time.Duration
	// MountsFirst, when set, is a directory of the slot (relative to it)
	// whose mounts are cleaned before the processes are killed: a FUSE
	// client killed first would leave a dead mount there.
	MountsFirst string
	// NetPrefix is the harness's private range: <NetPrefix>.N.0/24 for
	// slot N, which exists only inside the harness's namespaces.
	NetPrefix string
	// BridgeMAC is the format of the server's bridge's fixed MAC (Bridge),
	// given the slot: one per harness and slot.
	BridgeMAC string
}

// ServerNS is slot's server's network namespace.
func (s Slots) ServerNS(slot int) string { return s.Netns(slot, "srv") }

// ServerAddr is slot's server's address, <NetPrefix>.N.1.
func (s Slots) ServerAddr(slot int) string { return fmt.Sprintf("%s.%d.1", s.NetPrefix, slot) }

// ErrNoNetns is Prepare's error when the machine cannot make a network
// namespace: the harness cannot run here.
var ErrNoNetns = errors.New("cannot make a network namespace here")

// Prepare makes slot's directories dirs (under Dir) and its server's
// network: the namespace (ServerNS) and the bridge (Bridge), with the
// server's address.
func (s Slots) Prepare(slot int, dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(s.Dir(slot), d), 0o755); err != nil {
			return err
		}
	}
	if err := AddNetns(s.ServerNS(slot)); err != nil {
		return fmt.Errorf("%w: %v", ErrNoNetns, err)
	}
	return Bridge(s.ServerNS(slot), s.ServerAddr(slot), fmt.Sprintf(s.BridgeMAC, slot))
}

// Netns names slot's network namespace for name (the server's, a
// node's) as Clean finds it: NetnsPrefix+"N-"+name.
func (s Slots) Netns(slot int, name string) string {
	return fmt.Sprintf("%s%d-%s", s.NetnsPrefix, slot, name)
}

// Dir is slot's directory.
func (s Slots) Dir(slot int) string { return filepath.Join(s.Base, strconv.Itoa(slot)) }

// Held is a slot a harness took: its number, its directory, its
// server's namespace and address, and the lock that makes them its own
// until Release.
type Held struct {
	Slot     int
	Dir      string
	ServerNS string
	Addr     string
	lock     *os.File
}

// Take sweeps every slot whose lock is free (cleaning what a killed run
// left there, logging what it could not) and keeps the first one, locked.
func (s Slots) Take(logf func(string, ...any)) (Held, error) {
	if err := os.MkdirAll(s.Base, 0o755); err != nil {
		return Held{}, err
	}
	kept := -1
	var keptLock *os.File
	for slot := range s.Max {
		f, err := os.OpenFile(filepath.Join(s.Base, fmt.Sprintf("slot-%d.lock", slot)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return Held{}, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // a live process holds it
			continue
		}
		if err := s.Clean(slot); err != nil {
			logf("cleaning slot %d of %s left by an earlier run: %v", slot, s.Base, err)
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
		return Held{}, fmt.Errorf("no free slot of %d under %s", s.Max, s.Base)
	}
	return Held{Slot: kept, Dir: s.Dir(kept), ServerNS: s.ServerNS(kept), Addr: s.ServerAddr(kept), lock: keptLock}, nil
}

// Release cleans the held slot (Clean) and gives up its lock, also when
// the cleaning failed: the next Take sweeps it again.
func (s Slots) Release(h Held) error {
	err := s.Clean(h.Slot)
	_ = h.lock.Close()
	return err
}

// Clean removes whatever slot's owner left: the processes it recorded
// (checked by start time, so a reused PID is left alone) and those in its
// namespaces, its mounts and loop devices under its directory, the
// directory and its namespaces. The caller holds the slot's lock.
func (s Slots) Clean(slot int) error {
	dir := s.Dir(slot)
	prefix := s.Netns(slot, "")
	var nss []string
	if ents, err := os.ReadDir(NetnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				nss = append(nss, e.Name())
			}
		}
	}
	pids := Recorded(dir)
	for _, ns := range nss {
		pids = append(pids, InNetns(filepath.Join(NetnsDir, ns))...)
	}
	var errs []error
	_, statErr := os.Stat(dir)
	if s.MountsFirst != "" && statErr == nil {
		if err := testutil.CleanLeftovers(filepath.Join(dir, s.MountsFirst)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := KillAndWait(pids, s.KillWait); err != nil {
		errs = append(errs, err)
	}
	if statErr == nil {
		if err := testutil.CleanLeftovers(dir); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range nss {
		if err := DelNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
