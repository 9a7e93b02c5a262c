package ceph

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// A node's client is ceph-fuse (mount), as cephx user client.node<I>
// (user). What the harness's nodes share with GlusterFS's is procs.Nodes:
// MountNode, CutOff, Restore, ClientPID, NodeAddr and KillClient, after
// which the MDS keeps the dead client, and its locks, until it evicts it
// (by session_autoclose, 300 s, or Evict).

// user is node n's cephx name.
func user(n *procs.Node) string { return fmt.Sprintf("client.node%d", n.I) }

// clientLog is node n's ceph-fuse's log.
func (c *Cluster) clientLog(n *procs.Node) string {
	return filepath.Join(c.LogDir(), user(n)+".log")
}

// mount starts the node's ceph-fuse (in the foreground, our child, in the
// node's network namespace) and waits until the filesystem answers at the
// mount point.
func (c *Cluster) mount(n *procs.Node, clientArgs []string) error {
	args := append([]string{"-f", "-c", c.Conf(), "-n", user(n)}, clientArgs...)
	p, err := c.spawn(user(n), n.Link.NS, "ceph-fuse", append(args, n.Mnt)...)
	if err != nil {
		return err
	}
	n.Client = p
	err = procs.WaitMounted(n.Mnt, fuseType, p.Done, readyTimeout)
	if errors.Is(err, procs.ErrExited) {
		return fmt.Errorf("ceph-fuse exited: %v\n%s", p.Cmd.ProcessState, procs.Tail(filepath.Join(c.LogDir(), user(n)+".out"), 10))
	}
	return err
}

// fuseType is a ceph-fuse mount's type in the mount table.
const fuseType = "fuse.ceph-fuse"

// RestartClient mounts node again with a new ceph-fuse after its client
// died, was evicted or blocklisted: the old mount is unmounted lazily
// first, the old client killed if it still runs.
func (c *Cluster) RestartClient(t testing.TB, name string, clientArgs ...string) {
	t.Helper()
	n := c.Node(t, name)
	if err := procs.Unmount(n.Mnt, fuseType); err != nil {
		t.Fatalf("ceph: unmount %s's mount: %v", name, err)
	}
	_ = n.Client.Cmd.Process.Signal(syscall.SIGKILL)
	<-n.Client.Done
	if err := c.mount(n, clientArgs); err != nil {
		t.Fatalf("ceph: node %s: %v", name, err)
	}
}

// ClientUser is node's cephx name (client.nodeI).
func (c *Cluster) ClientUser(t testing.TB, name string) string {
	t.Helper()
	return user(c.Node(t, name))
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
	n := c.Node(t, name)
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
	pid := strconv.Itoa(n.Client.Cmd.Process.Pid)
	for _, s := range ls {
		if "client."+s.Meta.EntityID == user(n) && s.Meta.PID == pid {
			return Client{ID: s.ID, Addr: fmt.Sprintf("%s/%d", s.Entity.Addr.Addr, s.Entity.Addr.Nonce), State: s.State}
		}
	}
	t.Fatalf("ceph: no client of %s (%s, pid %s) in client ls: %s", name, user(n), pid, out)
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

// stopAll ends every node, then kills the daemons: the cluster's data is
// thrown away, so nothing is worth a clean shutdown's seconds.
func (c *Cluster) stopAll() error {
	errs := []error{c.RemoveNodes()}
	c.mu.Lock()
	daemons := slices.Clone(c.daemons)
	c.mu.Unlock()
	for _, p := range daemons {
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, p := range daemons {
		select {
		case <-p.Done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("%s (pid %d) did not exit", p.Name, p.Cmd.Process.Pid))
		}
	}
	return errors.Join(errs...)
}
