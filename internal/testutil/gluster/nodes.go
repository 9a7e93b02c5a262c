package gluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// MountNode adds a node: its network namespace, linked to the server's
// bridge, and the volume mounted by a FUSE client running in it. It returns
// the mount point (in the test's mount namespace). clientArgs are added to
// the glusterfs client's command line (e.g. "--attribute-timeout=0"). The
// node is torn down at t's cleanup (or the Cluster's, whichever comes
// first).
func (c *Cluster) MountNode(t testing.TB, name string, clientArgs ...string) string {
	t.Helper()
	start := time.Now()
	n, err := c.addNode(name)
	if err != nil {
		t.Fatalf("gluster: node %s: %v", name, err)
	}
	t.Cleanup(func() {
		start := time.Now()
		if err := c.removeNode(n); err != nil {
			t.Errorf("gluster: node %s: %v", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Logf("gluster: removing %s took %v", name, d.Round(time.Millisecond))
		}
	})
	if err := c.mount(n, clientArgs); err != nil {
		t.Fatalf("gluster: node %s: %v\n%s", name, err, procs.Tail(n.log, 20))
	}
	t.Logf("gluster: %s (%s) mounted the volume at %s in %v", name, n.link.Addr, n.mnt, time.Since(start).Round(time.Millisecond))
	return n.mnt
}

func (c *Cluster) addNode(name string) (*node, error) {
	if !nodeName.MatchString(name) {
		return nil, fmt.Errorf("invalid node name (want %s)", nodeName)
	}
	c.mu.Lock()
	if _, ok := c.nodes[name]; ok {
		c.mu.Unlock()
		return nil, errors.New("already mounted")
	}
	i := c.next
	c.next++
	if i >= 200 {
		c.mu.Unlock()
		return nil, errors.New("too many nodes")
	}
	n := &node{
		name: name,
		link: slots.NodeLink(c.srvNS, c.slot, i, name, netPrefix),
		mnt:  filepath.Join(c.dir, "mnt", name),
		log:  filepath.Join(c.dir, "log", "client-"+name+".log"),
	}
	c.nodes[name] = n
	c.mu.Unlock()

	if err := n.link.Add(); err != nil {
		return n, err
	}
	return n, os.MkdirAll(n.mnt, 0o755)
}

// mount starts the node's FUSE client (`glusterfs -N`, our child, in the
// node's network namespace only) and waits until the volume answers at the
// mount point.
func (c *Cluster) mount(n *node, clientArgs []string) error {
	args := []string{"--net=" + filepath.Join(procs.NetnsDir, n.link.NS), "--",
		"glusterfs", "-N", "--process-name", "fuse",
		"--volfile-server=" + c.addr, "--volfile-id=" + volName,
		"--log-file=" + n.log}
	args = append(append(args, clientArgs...), n.mnt)
	cmd := exec.Command("nsenter", args...)
	out, err := os.Create(n.log + ".out")
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd = cmd
	n.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(n.done) }()
	procs.Record(c.dir, cmd.Process.Pid, "client-"+n.name)
	err = procs.WaitMounted(n.mnt, fuseType, n.done, readyTimeout)
	if errors.Is(err, procs.ErrExited) {
		return fmt.Errorf("glusterfs client exited: %v", cmd.ProcessState)
	}
	if err != nil {
		return fmt.Errorf("volume %w", err)
	}
	return nil
}

// fuseType is a glusterfs client's mount's type in the mount table.
const fuseType = "fuse.glusterfs"

func (c *Cluster) node(name string) (*node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok || n.gone {
		return nil, fmt.Errorf("gluster: no node %q", name)
	}
	return n, nil
}

// CutOff takes node's link to the server down (its port on the server's
// bridge): from then on every packet between them is dropped, both ways,
// and neither side is told. Its mount stays; its client and the server
// find out by their own timeouts.
func (c *Cluster) CutOff(t testing.TB, name string) {
	t.Helper()
	c.setLink(t, name, false)
}

// Restore brings node's link up again.
func (c *Cluster) Restore(t testing.TB, name string) {
	t.Helper()
	c.setLink(t, name, true)
}

// setLink is CutOff (up false) and Restore (up true).
func (c *Cluster) setLink(t testing.TB, name string, up bool) {
	t.Helper()
	n, err := c.node(name)
	if err == nil {
		err = n.link.SetUp(up)
	}
	if err != nil {
		what := "cut off"
		if up {
			what = "restore"
		}
		t.Fatalf("gluster: %s %s: %v", what, name, err)
	}
}

// KillClient sends SIGKILL to node's glusterfs client and waits for it to
// be gone. The mount stays, dead: calls on it fail with ENOTCONN, and the
// kernel fails the FUSE requests that were pending.
func (c *Cluster) KillClient(t testing.TB, name string) {
	t.Helper()
	n, err := c.node(name)
	if err != nil {
		t.Fatal(err)
	}
	if n.cmd == nil || n.cmd.Process == nil {
		t.Fatalf("gluster: %s has no client", name)
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("gluster: %s's client (pid %d) did not die", name, n.cmd.Process.Pid)
	}
}

// ClientPID is node's glusterfs client's PID.
func (c *Cluster) ClientPID(t testing.TB, name string) int {
	t.Helper()
	n, err := c.node(name)
	if err != nil {
		t.Fatal(err)
	}
	return n.cmd.Process.Pid
}

// NodeAddr is node's address.
func (c *Cluster) NodeAddr(t testing.TB, name string) string {
	t.Helper()
	n, err := c.node(name)
	if err != nil {
		t.Fatal(err)
	}
	return n.link.Addr
}

// removeNode tears the node down (Link.Remove), once.
func (c *Cluster) removeNode(n *node) error {
	c.mu.Lock()
	if n.gone {
		c.mu.Unlock()
		return nil
	}
	n.gone = true
	c.mu.Unlock()
	var client *os.Process
	if n.cmd != nil {
		client = n.cmd.Process
	}
	return n.link.Remove(n.mnt, client, n.done)
}

// RestartClient starts node's client again after KillClient, at the same
// mount point, as a node whose FUSE client is restarted without a reboot:
// the dead mount is unmounted lazily first (node.sh revive does the same),
// since loop devices attached on its files keep it busy. Such a device
// stays attached to its file on the dead mount, which the kernel now
// reports relative to that mount's root ("/pool/volumes/x.img").
func (c *Cluster) RestartClient(t testing.TB, name string, clientArgs ...string) {
	t.Helper()
	n, err := c.node(name)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.done:
	default:
		t.Fatalf("gluster: %s's client (pid %d) is still running: KillClient first", name, n.cmd.Process.Pid)
	}
	for procs.Mounted(n.mnt, fuseType) {
		if err := unix.Unmount(n.mnt, unix.MNT_DETACH); err != nil {
			t.Fatalf("gluster: unmount %s's dead mount: %v", name, err)
		}
	}
	if err := c.mount(n, clientArgs); err != nil {
		t.Fatalf("gluster: node %s: %v\n%s", name, err, procs.Tail(n.log, 20))
	}
}
