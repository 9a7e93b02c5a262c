package ceph

import (
	"errors"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// slots are where clusters of this harness run, one per test process.
// The mounts go first: a ceph-fuse killed before its mount leaves a dead
// mount, one alive ends when it is unmounted.
var slots = procs.Slots{Base: Base, Max: maxSlots, NetnsPrefix: Prefix, KillWait: 10 * time.Second, MountsFirst: "mnt",
	NetPrefix: netPrefix, BridgeMAC: "02:66:76:63:%02x:01"}

// teardown stops the nodes and daemons, deletes the namespaces and the
// slot's directory, and releases the slot.
func (c *Cluster) teardown(logf func(string, ...any)) error {
	start := time.Now()
	errs := []error{c.stopAll()}
	if err := slots.Release(c.held); err != nil {
		errs = append(errs, err)
	}
	logf("ceph: slot %d torn down in %v", c.held.Slot, time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}
