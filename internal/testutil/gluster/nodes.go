package gluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// A node's client is `glusterfs -N` (mount). What the harness's nodes
// share with Ceph's is procs.Nodes: MountNode, CutOff, Restore,
// ClientPID, NodeAddr and KillClient, after which the kernel fails the
// FUSE requests that were pending on the node's mount.

// clientLog is node n's client's log.
func (c *Cluster) clientLog(n *procs.Node) string {
	return filepath.Join(c.held.Dir, "log", "client-"+n.Name+".log")
}

// mount starts the node's FUSE client (`glusterfs -N`, our child, in the
// node's network namespace only) and waits until the volume answers at the
// mount point.
func (c *Cluster) mount(n *procs.Node, clientArgs []string) error {
	log := c.clientLog(n)
	args := []string{"-N", "--process-name", "fuse",
		"--volfile-server=" + c.held.Addr, "--volfile-id=" + volName,
		"--log-file=" + log}
	args = append(append(args, clientArgs...), n.Mnt)
	p, err := procs.Spawn(c.held.Dir, "client-"+n.Name, n.Link.NS, log+".out", "glusterfs", args...)
	if err != nil {
		return err
	}
	n.Client = p
	err = procs.WaitMounted(n.Mnt, fuseType, p.Done, readyTimeout)
	if errors.Is(err, procs.ErrExited) {
		return fmt.Errorf("glusterfs client exited: %v", p.Cmd.ProcessState)
	}
	if err != nil {
		return fmt.Errorf("volume %w", err)
	}
	return nil
}

// fuseType is a glusterfs client's mount's type in the mount table.
const fuseType = "fuse.glusterfs"

// RestartClient starts node's client again after KillClient, at the same
// mount point, as a node whose FUSE client is restarted without a reboot:
// the dead mount is unmounted lazily first (node.sh revive does the same),
// since loop devices attached on its files keep it busy. Such a device
// stays attached to its file on the dead mount, which the kernel now
// reports relative to that mount's root ("/pool/volumes/x.img").
func (c *Cluster) RestartClient(t testing.TB, name string, clientArgs ...string) {
	t.Helper()
	n := c.Node(t, name)
	select {
	case <-n.Client.Done:
	default:
		t.Fatalf("gluster: %s's client (pid %d) is still running: KillClient first", name, n.Client.Cmd.Process.Pid)
	}
	if err := procs.Unmount(n.Mnt, fuseType); err != nil {
		t.Fatalf("gluster: unmount %s's dead mount: %v", name, err)
	}
	if err := c.mount(n, clientArgs); err != nil {
		t.Fatalf("gluster: node %s: %v\n%s", name, err, procs.Tail(c.clientLog(n), 20))
	}
}
