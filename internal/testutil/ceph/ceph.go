// Package ceph runs a one-host Ceph cluster with a CephFS for tests, and
// mounts it once per simulated node with ceph-fuse, each node's client in a
// network namespace of its own, so that a test can cut a node off, kill its
// client, or have the cluster evict and blocklist it.
//
//	func TestMain(m *testing.M) { os.Exit(ceph.Main(m)) }
//
//	c := ceph.Shared(t)            // one cluster for the package's tests
//	a := c.MountNode(t, "node-a")  // a directory; the CephFS is mounted there
//	b := c.MountNode(t, "node-b")
//	c.CutOff(t, "node-a")          // node-a's link to the cluster goes down
//	c.Blocklist(t, "node-b")       // the OSDs and MDS refuse node-b's client
//	c.Evict(t, "node-b")           // the MDS drops it (and blocklists it)
//	c.KillClient(t, "node-a")      // SIGKILL to node-a's ceph-fuse
//	c.WaitForRoom(t)               // before a test's first volume: statfs has room
//
// Start (or the first Shared) takes about 15-25 s on a loaded 2-core
// machine: the monitor, then the OSD's BlueStore made on a sparse file, the
// pools and the filesystem, the MDS made active. MountNode takes about a
// second. Idle, the daemons hold about 0.5 GiB of memory.
//
// Layout (slot N, 0..maxSlots-1, is taken per running Cluster):
//
//   - network namespace fvcephN-srv holds a bridge br0 with 10.214.N.1/24
//     (and a fixed MAC) and every daemon: ceph-mon (v2 port 3300, v1
//     6789), ceph-mgr, ceph-osd and ceph-mds, each our child, run in the
//     foreground (-f) through nsenter with only the network namespace
//     entered, so its PID is the one recorded;
//   - per node, network namespace fvcephN-<node> holds eth0 with
//     10.214.N.(10+i)/24 and a veth to the bridge (port pN-i... named pI);
//     CutOff takes that port down, Restore brings it up; the node's client
//     is `ceph-fuse -f` in that namespace, as cephx user client.nodeI,
//     mounted in the host's mount namespace at DIR/mnt/<node>;
//   - DIR is /tmp/filevol-test/.fvceph/N: ceph.conf, keyrings, the daemons'
//     data (the OSD's 10 GiB sparse block file), admin sockets (run/), logs
//     (log/) and mount points. Nothing is read from or written to
//     /etc/ceph or /var/lib/ceph: every program gets -c DIR/ceph.conf and
//     its keyring.
//
// Clean-up: a Cluster's teardown unmounts, kills the processes it started
// (by PID) and those in its namespaces, deletes its namespaces and removes
// DIR. Each slot is held with flock on Base/slot-N.lock; Start first cleans
// every slot whose lock it can take (what a killed earlier run left: its
// recorded processes, checked by start time, those in its namespaces, its
// mounts, namespaces and directory), and never touches a slot a live
// process holds.
//
// Start skips the test (t.Skip, with the reason) when it does not run as
// root, when a program is missing (hack/install-deps.sh installs them), when
// /dev/fuse is missing, or when network namespaces cannot be made. A cluster
// that is there but fails to start fails the test.
package ceph

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/procs"
)

const (
	// Prefix starts the harness's network namespaces: fvcephN-*.
	Prefix = "fvceph"
	// maxSlots bounds the Clusters running at once on the machine.
	maxSlots = 16
	// maxNodes is the number of client keys made at start (client.node0
	// ... client.nodeN-1): a node takes the next one.
	maxNodes = 48
	// netPrefix is the private range used: 10.214.N.0/24 for slot N. These
	// addresses exist only inside the harness's namespaces.
	netPrefix = "10.214"
	// FSName is the CephFS's name.
	FSName = "cephfs"
	// mdsID, monID, mgrID and osdID name the daemons.
	monID, mgrID, mdsID = "a", "x", "a"
	// readyTimeout bounds each wait for a daemon or a mount to come up.
	readyTimeout = 2 * time.Minute
)

// Base holds the slot directories and their lock files, under the test
// scratch area (testutil.Base) but apart from testutil.Scratch's names,
// which cannot start with a dot.
var Base = filepath.Join(testutil.Base, ".fvceph")

var programs = []string{"ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "ceph-fuse", "ceph", "monmaptool", "ip", "nsenter"}

// Cluster is one running cluster and its nodes (procs.Nodes: MountNode,
// CutOff, Restore, KillClient, ClientPID, NodeAddr).
type Cluster struct {
	*procs.Nodes

	// held is the slot the cluster runs in (its directory, its server's
	// namespace and address).
	held procs.Held
	fsid string

	mu      sync.Mutex
	daemons []*procs.Proc
	// room: WaitForRoom saw the data pool's room known.
	room atomic.Bool

	// StartDuration is how long Start took (slot sweep included).
	StartDuration time.Duration
}

// Start makes the cluster and its filesystem and registers its teardown
// with t.Cleanup. Nodes are added with MountNode.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, skip, err := start(t.Logf)
	if skip != "" {
		t.Skip(skip)
	}
	if c != nil {
		t.Cleanup(func() {
			if err := c.teardown(t.Logf); err != nil {
				t.Errorf("ceph: teardown: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("ceph: %v", err)
	}
	return c
}

// start is Start without a test: it returns the reason to skip, or the
// cluster (also on an error, for its teardown).
func start(logf func(string, ...any)) (*Cluster, string, error) {
	begin := time.Now()
	if skip := missing(); skip != "" {
		return nil, skip, nil
	}
	held, err := slots.Take(logf)
	if err != nil {
		return nil, "", err
	}
	c := &Cluster{held: held}
	c.Nodes = procs.NewNodes(procs.NodesConfig{Harness: "ceph", Slots: slots, Slot: held.Slot, Max: maxNodes,
		Mount: c.mount, ClientLog: c.clientLog})
	err = slots.Prepare(held.Slot, "run", "log", "mnt", "mon", "mgr", "osd", "mds")
	if errors.Is(err, procs.ErrNoNetns) {
		return c, "ceph: " + err.Error(), nil
	}
	if err != nil {
		return c, "", err
	}
	if err := c.bootstrap(logf, begin); err != nil {
		return c, "", err
	}
	c.StartDuration = time.Since(begin)
	logf("ceph: cluster %s on %s up in %v (slot %d, %s)", c.fsid, c.held.Addr, c.StartDuration.Round(time.Millisecond), held.Slot, c.held.Dir)
	return c, "", nil
}

// missing says why the harness cannot run here, or "".
func missing() string {
	if os.Geteuid() != 0 {
		return "ceph: needs root (network namespaces, Ceph daemons, FUSE mounts)"
	}
	if absent := procs.NotInstalled(programs...); len(absent) > 0 {
		return fmt.Sprintf("ceph: missing %s: run hack/install-deps.sh as root (ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph-common)", strings.Join(absent, ", "))
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Sprintf("ceph: no FUSE: %v", err)
	}
	return ""
}

// Addr is the cluster's address (the monitor's and every daemon's).
func (c *Cluster) Addr() string { return c.held.Addr }

// FSID is the cluster's fsid.
func (c *Cluster) FSID() string { return c.fsid }

// Dir is the slot's directory; tests may make scratch directories under it
// (what is mounted under it is unmounted at teardown).
func (c *Cluster) Dir() string { return c.held.Dir }

// Conf is the cluster's ceph.conf.
func (c *Cluster) Conf() string { return filepath.Join(c.held.Dir, "ceph.conf") }

// RunDir holds every daemon's and client's admin socket.
func (c *Cluster) RunDir() string { return filepath.Join(c.held.Dir, "run") }

// LogDir holds every daemon's and client's log.
func (c *Cluster) LogDir() string { return filepath.Join(c.held.Dir, "log") }
