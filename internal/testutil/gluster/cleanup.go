package gluster

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// slots are where clusters of this harness run, one per test process.
var slots = procs.Slots{Base: Base, Max: maxSlots, NetnsPrefix: Prefix, KillWait: 5 * time.Second,
	NetPrefix: netPrefix, BridgeMAC: "02:66:76:67:%02x:01"}

// teardown removes the nodes, kills the server (SIGKILL to unshare, whose
// --kill-child takes the PID namespace's init, and with it glusterd and the
// brick), deletes the server's namespace and the slot's directory, and
// releases the slot.
func (c *Cluster) teardown() error {
	errs := []error{c.RemoveNodes()}
	if c.server != nil {
		_ = c.server.Cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-c.server.Done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("server (pid %d) did not exit", c.server.Cmd.Process.Pid))
		}
	}
	if err := slots.Release(c.held); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
