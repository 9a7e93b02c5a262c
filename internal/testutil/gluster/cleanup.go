package gluster

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// slots are where clusters of this harness run, one per test process.
var slots = procs.Slots{Base: Base, Max: maxSlots, NetnsPrefix: Prefix, KillWait: 5 * time.Second}

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
	if err := slots.Clean(c.slot); err != nil {
		errs = append(errs, err)
	}
	_ = c.lock.Close()
	return errors.Join(errs...)
}
