package gluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
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
	t.Logf("gluster: %s (%s) mounted the volume at %s in %v", name, n.addr, n.mnt, time.Since(start).Round(time.Millisecond))
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
		ns:   fmt.Sprintf("%s%d-%s", Prefix, c.slot, name),
		port: fmt.Sprintf("p%d", i),
		addr: fmt.Sprintf("%s.%d.%d", netPrefix, c.slot, 10+i),
		mnt:  filepath.Join(c.dir, "mnt", name),
		log:  filepath.Join(c.dir, "log", "client-"+name+".log"),
	}
	c.nodes[name] = n
	c.mu.Unlock()

	if err := procs.AddNetns(n.ns); err != nil {
		return n, err
	}
	steps := [][]string{
		{"-n", n.ns, "link", "set", "lo", "up"},
		{"-n", c.srvNS, "link", "add", n.port, "type", "veth", "peer", "name", "eth0", "netns", n.ns},
		{"-n", c.srvNS, "link", "set", n.port, "master", "br0", "up"},
		{"-n", n.ns, "addr", "add", n.addr + "/24", "dev", "eth0"},
		{"-n", n.ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := procs.IP(s...); err != nil {
			return n, err
		}
	}
	return n, os.MkdirAll(n.mnt, 0o755)
}

// mount starts the node's FUSE client (`glusterfs -N`, our child, in the
// node's network namespace only) and waits until the volume answers at the
// mount point.
func (c *Cluster) mount(n *node, clientArgs []string) error {
	args := []string{"--net=" + filepath.Join(procs.NetnsDir, n.ns), "--",
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
	deadline := time.Now().Add(readyTimeout)
	for {
		if fuseMounted(n.mnt) {
			var st unix.Statfs_t
			if err := unix.Statfs(n.mnt, &st); err == nil {
				return nil
			}
		}
		select {
		case <-n.done:
			return fmt.Errorf("glusterfs client exited: %v", cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("volume not mounted after %v", readyTimeout)
		}
	}
}

// fuseMounted reports whether a fuse.glusterfs filesystem is mounted at dir.
func fuseMounted(dir string) bool {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	return err == nil && slices.ContainsFunc(ms, func(m *mountinfo.Info) bool { return m.FSType == "fuse.glusterfs" })
}

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
	n, err := c.node(name)
	if err == nil {
		err = procs.IP("-n", c.srvNS, "link", "set", n.port, "down")
	}
	if err != nil {
		t.Fatalf("gluster: cut off %s: %v", name, err)
	}
}

// Restore brings node's link up again.
func (c *Cluster) Restore(t testing.TB, name string) {
	t.Helper()
	n, err := c.node(name)
	if err == nil {
		err = procs.IP("-n", c.srvNS, "link", "set", n.port, "up")
	}
	if err != nil {
		t.Fatalf("gluster: restore %s: %v", name, err)
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
	return n.addr
}

// removeNode brings the node's link back (so that nothing waits on a
// cut-off server), unmounts (detaching loop devices left on files under the
// mount), stops its client and deletes its namespace.
func (c *Cluster) removeNode(n *node) error {
	c.mu.Lock()
	if n.gone {
		c.mu.Unlock()
		return nil
	}
	n.gone = true
	c.mu.Unlock()
	var errs []error
	_ = procs.IP("-n", c.srvNS, "link", "set", n.port, "up")
	if err := testutil.CleanLeftovers(n.mnt); err != nil {
		errs = append(errs, err)
	}
	if n.cmd != nil && n.cmd.Process != nil {
		select {
		case <-n.done: // the unmount ended it
		case <-time.After(5 * time.Second):
			_ = n.cmd.Process.Signal(syscall.SIGKILL)
			<-n.done
		}
	}
	if err := procs.DelNetns(n.ns); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
	for fuseMounted(n.mnt) {
		if err := unix.Unmount(n.mnt, unix.MNT_DETACH); err != nil {
			t.Fatalf("gluster: unmount %s's dead mount: %v", name, err)
		}
	}
	if err := c.mount(n, clientArgs); err != nil {
		t.Fatalf("gluster: node %s: %v\n%s", name, err, procs.Tail(n.log, 20))
	}
}
