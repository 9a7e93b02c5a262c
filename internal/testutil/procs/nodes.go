package procs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a process a harness started and waits for.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Done is closed when the process has exited.
	Done chan struct{}
}

// Spawn starts prog with args in the network namespace ns (through
// nsenter, with only the network namespace entered, so that the PID
// recorded is the one that runs), in a process group of its own, its
// output appended to the file out, and records it in dir/pids as name.
func Spawn(dir, name, ns, out, prog string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=" + filepath.Join(NetnsDir, ns), "--", prog}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.Done) }()
	Record(dir, cmd.Process.Pid, name)
	return p, nil
}

// Node is a simulated node of a harness: its link to the server's bridge,
// the mount point of its FUSE client, and that client once started.
type Node struct {
	Name string
	// I is the node's number in its cluster, in the order nodes were
	// added: its link's (Slots.NodeLink) and whatever else the harness
	// numbers per node.
	I      int
	Link   Link
	Mnt    string
	Client *Proc
	gone   bool
}

// Nodes are the simulated nodes of one running cluster: each with a
// network namespace linked to the server's bridge and a FUSE client of
// its own, mounted in the test's mount namespace at <slot dir>/mnt/<name>. A
// harness's Cluster embeds them (NewNodes); what differs between
// harnesses is how a client mounts and where it logs (NodesConfig).
type Nodes struct {
	cfg NodesConfig

	mu     sync.Mutex
	byName map[string]*Node
	next   int
}

// NodesConfig is what a harness tells its Nodes.
type NodesConfig struct {
	// Harness starts the failure messages: "gluster", "ceph".
	Harness string
	// Slots and Slot place each node's link (Slots.NodeLink) and its
	// mount point, in the slot's directory.
	Slots Slots
	Slot  int
	// Max bounds the nodes of one cluster.
	Max int
	// Mount starts n's client with clientArgs added to its command line
	// (setting n.Client) and waits until its mount answers.
	Mount func(n *Node, clientArgs []string) error
	// ClientLog is the file n's client logs to, shown when it fails.
	ClientLog func(n *Node) string
}

// NewNodes are a cluster's nodes, none yet.
func NewNodes(cfg NodesConfig) *Nodes { return &Nodes{cfg: cfg, byName: map[string]*Node{}} }

var nodeName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,19}$`)

// MountNode adds a node: its network namespace, linked to the server's
// bridge, and the shared filesystem mounted there by a FUSE client of its
// own. It returns the mount point (in the test's mount namespace).
// clientArgs are added to the client's command line. The node is torn
// down at t's cleanup (or the Cluster's, whichever comes first).
func (ns *Nodes) MountNode(t testing.TB, name string, clientArgs ...string) string {
	t.Helper()
	start := time.Now()
	n, err := ns.add(name)
	if err != nil {
		t.Fatalf("%s: node %s: %v", ns.cfg.Harness, name, err)
	}
	t.Cleanup(func() {
		start := time.Now()
		if err := ns.remove(n); err != nil {
			t.Errorf("%s: node %s: %v", ns.cfg.Harness, name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Logf("%s: removing %s took %v", ns.cfg.Harness, name, d.Round(time.Millisecond))
		}
	})
	if err := ns.cfg.Mount(n, clientArgs); err != nil {
		t.Fatalf("%s: node %s: %v\n%s", ns.cfg.Harness, name, err, Tail(ns.cfg.ClientLog(n), 20))
	}
	t.Logf("%s: %s (%s) mounted the filesystem at %s in %v", ns.cfg.Harness, name, n.Link.Addr, n.Mnt, time.Since(start).Round(time.Millisecond))
	return n.Mnt
}

func (ns *Nodes) add(name string) (*Node, error) {
	if !nodeName.MatchString(name) {
		return nil, fmt.Errorf("invalid node name (want %s)", nodeName)
	}
	ns.mu.Lock()
	if n, ok := ns.byName[name]; ok && !n.gone {
		ns.mu.Unlock()
		return nil, errors.New("already mounted")
	}
	i := ns.next
	ns.next++
	if i >= ns.cfg.Max {
		ns.mu.Unlock()
		return nil, fmt.Errorf("more than %d nodes in one cluster", ns.cfg.Max)
	}
	n := &Node{
		Name: name,
		I:    i,
		Link: ns.cfg.Slots.NodeLink(ns.cfg.Slot, i, name),
		Mnt:  filepath.Join(ns.cfg.Slots.Dir(ns.cfg.Slot), "mnt", name),
	}
	ns.byName[name] = n
	ns.mu.Unlock()

	if err := n.Link.Add(); err != nil {
		return n, err
	}
	return n, os.MkdirAll(n.Mnt, 0o755)
}

// Node is the node called name, which MountNode added and nothing has
// removed yet.
func (ns *Nodes) Node(t testing.TB, name string) *Node {
	t.Helper()
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n, ok := ns.byName[name]
	if !ok || n.gone {
		t.Fatalf("%s: no node %q", ns.cfg.Harness, name)
	}
	return n
}

// NodeNetns is the path of node's network namespace, for a program that
// must reach the server as the node's client does (nsenter --net=).
func (ns *Nodes) NodeNetns(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(NetnsDir, ns.Node(t, name).Link.NS)
}

// CutOff takes node's link to the server down (its port on the server's
// bridge): from then on every packet between them is dropped, both ways,
// and neither side is told. Its mount stays; its client and the server
// find out by their own timeouts.
func (ns *Nodes) CutOff(t testing.TB, name string) {
	t.Helper()
	if err := ns.Node(t, name).Link.SetUp(false); err != nil {
		t.Fatalf("%s: cut off %s: %v", ns.cfg.Harness, name, err)
	}
}

// Restore brings node's link up again.
func (ns *Nodes) Restore(t testing.TB, name string) {
	t.Helper()
	if err := ns.Node(t, name).Link.SetUp(true); err != nil {
		t.Fatalf("%s: restore %s: %v", ns.cfg.Harness, name, err)
	}
}

// KillClient sends SIGKILL to node's FUSE client and waits until it is
// gone. The mount stays, dead: calls on it fail with ENOTCONN ("transport
// endpoint is not connected").
func (ns *Nodes) KillClient(t testing.TB, name string) {
	t.Helper()
	n := ns.Node(t, name)
	if n.Client == nil {
		t.Fatalf("%s: %s has no client", ns.cfg.Harness, name)
	}
	_ = n.Client.Cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-n.Client.Done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: %s's client (pid %d) did not die", ns.cfg.Harness, name, n.Client.Cmd.Process.Pid)
	}
}

// ClientPID is node's FUSE client's PID.
func (ns *Nodes) ClientPID(t testing.TB, name string) int {
	t.Helper()
	return ns.Node(t, name).Client.Cmd.Process.Pid
}

// NodeAddr is node's IP address.
func (ns *Nodes) NodeAddr(t testing.TB, name string) string {
	t.Helper()
	return ns.Node(t, name).Link.Addr
}

// remove tears the node down (Link.Remove), once.
func (ns *Nodes) remove(n *Node) error {
	ns.mu.Lock()
	if n.gone {
		ns.mu.Unlock()
		return nil
	}
	n.gone = true
	ns.mu.Unlock()
	if n.Client == nil {
		return n.Link.Remove(n.Mnt, nil, nil)
	}
	return n.Link.Remove(n.Mnt, n.Client.Cmd.Process, n.Client.Done)
}

// RemoveNodes tears every node down, as the Cluster's teardown does
// before it stops the server.
func (ns *Nodes) RemoveNodes() error {
	ns.mu.Lock()
	nodes := make([]*Node, 0, len(ns.byName))
	for _, n := range ns.byName {
		nodes = append(nodes, n)
	}
	ns.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		if err := ns.remove(n); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}
