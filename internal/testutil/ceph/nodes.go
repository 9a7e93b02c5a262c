package ceph

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// MountNode adds a node: its network namespace, linked to the cluster's
// bridge, and the CephFS mounted there by a ceph-fuse client of its own
// cephx name. It returns the mount point (in the test's mount namespace).
// clientArgs are added to ceph-fuse's command line (e.g.
// "--fuse_disable_pagecache=false" to override ceph.conf's [client]). The
// node is torn down at t's cleanup (or the Cluster's, whichever comes
// first).
func (c *Cluster) MountNode(t testing.TB, name string, clientArgs ...string) string {
	t.Helper()
	start := time.Now()
	n, err := c.addNode(name)
	if err != nil {
		t.Fatalf("ceph: node %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := c.removeNode(n); err != nil {
			t.Errorf("ceph: node %s: %v", name, err)
		}
	})
	if err := c.mount(n, clientArgs); err != nil {
		t.Fatalf("ceph: node %s: %v\n%s", name, err, procs.Tail(filepath.Join(c.LogDir(), n.user+".log"), 20))
	}
	t.Logf("ceph: %s (%s, %s) mounted the filesystem at %s in %v", name, n.user, n.link.Addr, n.mnt, time.Since(start).Round(time.Millisecond))
	return n.mnt
}

func (c *Cluster) addNode(name string) (*node, error) {
	if !nodeName.MatchString(name) {
		return nil, fmt.Errorf("invalid node name (want %s)", nodeName)
	}
	c.mu.Lock()
	if n, ok := c.nodes[name]; ok && !n.gone {
		c.mu.Unlock()
		return nil, errors.New("already mounted")
	}
	i := c.next
	c.next++
	if i >= maxNodes {
		c.mu.Unlock()
		return nil, fmt.Errorf("more than %d nodes in one cluster", maxNodes)
	}
	n := &node{
		name: name,
		link: slots.NodeLink(c.srvNS, c.slot, i, name, netPrefix),
		mnt:  filepath.Join(c.dir, "mnt", name),
		user: fmt.Sprintf("client.node%d", i),
	}
	c.nodes[name] = n
	c.mu.Unlock()

	if err := n.link.Add(); err != nil {
		return n, err
	}
	return n, os.MkdirAll(n.mnt, 0o755)
}

// mount starts the node's ceph-fuse (in the foreground, our child, in the
// node's network namespace) and waits until the filesystem answers at the
// mount point.
func (c *Cluster) mount(n *node, clientArgs []string) error {
	args := append([]string{"-f", "-c", c.Conf(), "-n", n.user}, clientArgs...)
	p, err := c.spawn(n.user, n.link.NS, "ceph-fuse", append(args, n.mnt)...)
	if err != nil {
		return err
	}
	n.p = p
	err = procs.WaitMounted(n.mnt, fuseType, p.done, readyTimeout)
	if errors.Is(err, procs.ErrExited) {
		return fmt.Errorf("ceph-fuse exited: %v\n%s", p.cmd.ProcessState, procs.Tail(filepath.Join(c.LogDir(), n.user+".out"), 10))
	}
	return err
}

// fuseType is a ceph-fuse mount's type in the mount table.
const fuseType = "fuse.ceph-fuse"

func (c *Cluster) node(t testing.TB, name string) *node {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok || n.gone {
		t.Fatalf("ceph: no node %q", name)
	}
	return n
}

// CutOff takes node's link to the cluster down (its port on the bridge):
// every packet between them is dropped, both ways, and neither side is
// told.
func (c *Cluster) CutOff(t testing.TB, name string) {
	t.Helper()
	if err := c.node(t, name).link.SetUp(false); err != nil {
		t.Fatalf("ceph: cut off %s: %v", name, err)
	}
}

// Restore brings node's link up again.
func (c *Cluster) Restore(t testing.TB, name string) {
	t.Helper()
	if err := c.node(t, name).link.SetUp(true); err != nil {
		t.Fatalf("ceph: restore %s: %v", name, err)
	}
}

// KillClient sends SIGKILL to node's ceph-fuse and waits until it is gone.
// The mount stays, dead ("transport endpoint is not connected"); the MDS
// keeps the client, and its locks, until it evicts it (by
// session_autoclose, 300 s, or Evict).
func (c *Cluster) KillClient(t testing.TB, name string) {
	t.Helper()
	n := c.node(t, name)
	_ = n.p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-n.p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("ceph: %s's client (pid %d) did not die", name, n.p.cmd.Process.Pid)
	}
}

// RestartClient mounts node again with a new ceph-fuse after its client
// died, was evicted or blocklisted: the old mount is unmounted lazily
// first, the old client killed if it still runs.
func (c *Cluster) RestartClient(t testing.TB, name string, clientArgs ...string) {
	t.Helper()
	n := c.node(t, name)
	for procs.Mounted(n.mnt, fuseType) {
		if err := unix.Unmount(n.mnt, unix.MNT_DETACH); err != nil {
			t.Fatalf("ceph: unmount %s's mount: %v", name, err)
		}
	}
	_ = n.p.cmd.Process.Signal(syscall.SIGKILL)
	<-n.p.done
	if err := c.mount(n, clientArgs); err != nil {
		t.Fatalf("ceph: node %s: %v", name, err)
	}
}

// ClientPID is node's ceph-fuse's PID.
func (c *Cluster) ClientPID(t testing.TB, name string) int {
	t.Helper()
	return c.node(t, name).p.cmd.Process.Pid
}

// ClientUser is node's cephx name (client.nodeI).
func (c *Cluster) ClientUser(t testing.TB, name string) string {
	t.Helper()
	return c.node(t, name).user
}

// NodeAddr is node's IP address.
func (c *Cluster) NodeAddr(t testing.TB, name string) string {
	t.Helper()
	return c.node(t, name).link.Addr
}

// Client is a client as the MDS lists it (client ls).
type Client struct {
	// ID is the client's global ID (client.ID).
	ID uint64
	// Addr is its address as blocklists take it: IP:port/nonce.
	Addr  string
	State string
}

// Client finds node's current client in `ceph tell mds.a client ls` (by its cephx name and ceph-fuse's PID).
func (c *Cluster) Client(t testing.TB, name string) Client {
	t.Helper()
	n := c.node(t, name)
	out := c.Ceph(t, "tell", "mds."+mdsID, "client", "ls", "--format", "json")
	var ls []struct {
		ID     uint64 `json:"id"`
		State  string `json:"state"`
		Entity struct {
			Addr struct {
				Addr  string `json:"addr"`
				Nonce uint64 `json:"nonce"`
			} `json:"addr"`
		} `json:"entity"`
		Meta struct {
			EntityID string `json:"entity_id"`
			PID      string `json:"pid"`
		} `json:"client_metadata"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		t.Fatalf("ceph: client ls: %v: %s", err, out)
	}
	pid := strconv.Itoa(n.p.cmd.Process.Pid)
	for _, s := range ls {
		if "client."+s.Meta.EntityID == n.user && s.Meta.PID == pid {
			return Client{ID: s.ID, Addr: fmt.Sprintf("%s/%d", s.Entity.Addr.Addr, s.Entity.Addr.Nonce), State: s.State}
		}
	}
	t.Fatalf("ceph: no client of %s (%s, pid %s) in client ls: %s", name, n.user, pid, out)
	return Client{}
}

// Evict has the MDS evict node's client (`client evict id=N`): the MDS
// forgets it, its capabilities and locks are released and, by default
// (mds_session_blocklist_on_evict), its address is blocklisted.
func (c *Cluster) Evict(t testing.TB, name string) Client {
	t.Helper()
	s := c.Client(t, name)
	c.Ceph(t, "tell", "mds."+mdsID, "client", "evict", "id="+strconv.FormatUint(s.ID, 10))
	return s
}

// Blocklist adds node's client's address to the OSD map's blocklist: the
// OSDs refuse its requests and the MDS drops the client.
func (c *Cluster) Blocklist(t testing.TB, name string) Client {
	t.Helper()
	s := c.Client(t, name)
	c.Ceph(t, "osd", "blocklist", "add", s.Addr)
	return s
}

// Unblocklist removes an address Blocklist or Evict blocklisted.
func (c *Cluster) Unblocklist(t testing.TB, s Client) {
	t.Helper()
	c.Ceph(t, "osd", "blocklist", "rm", s.Addr)
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
	if n.p == nil {
		return n.link.Remove(n.mnt, nil, nil)
	}
	return n.link.Remove(n.mnt, n.p.cmd.Process, n.p.done)
}

// stopAll ends every node, then kills the daemons: the cluster's data is
// thrown away, so nothing is worth a clean shutdown's seconds.
func (c *Cluster) stopAll() error {
	c.mu.Lock()
	nodes := make([]*node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n)
	}
	daemons := slices.Clone(c.daemons)
	c.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		if err := c.removeNode(n); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.name, err))
		}
	}
	for _, p := range daemons {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, p := range daemons {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("%s (pid %d) did not exit", p.name, p.cmd.Process.Pid))
		}
	}
	return errors.Join(errs...)
}
