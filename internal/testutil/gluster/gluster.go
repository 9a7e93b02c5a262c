// Package gluster runs a one-brick GlusterFS volume for tests, and mounts it
// once per simulated node with the FUSE client, each node's client in a
// network namespace of its own so that a test can cut a node off the
// server, restore it, or kill its client.
//
//	g := gluster.Start(t, gluster.Options{PingTimeout: 5 * time.Second})
//	a := g.MountNode(t, "node-a") // a directory; the volume is mounted there
//	b := g.MountNode(t, "node-b")
//	g.CutOff(t, "node-a")         // node-a's link to the server goes down
//	g.Restore(t, "node-a")
//	g.KillClient(t, "node-b")     // SIGKILL to node-b's glusterfs process
//	g.RestartBrick(t)             // the brick crashes and is started again
//	g.BrickDir()                  // the volume's files as the server has them
//	gluster.Start(t, gluster.Options{TLS: true}) // client.ssl, server.ssl on (tls.go)
//
// Start takes 0.2-1 s (glusterd, volume create and start, brick online),
// MountNode 35-70 ms, a teardown 30-250 ms, on a loaded 2-core machine.
//
// Layout (slot N, 0..maxSlots-1, is taken per running Cluster):
//
//   - network namespace fvglN-srv holds a bridge br0 with 10.213.N.1/24 (and
//     a fixed MAC) and the server: glusterd and the brick process
//     (glusterfsd) it starts, in a PID namespace and a private mount
//     namespace of their own (glusterd's /run, /var/lib/glusterd and
//     /var/log/glusterfs are directories of the harness; its geo-replication
//     helper is a stub there, which saves 2 s of start), so they share
//     nothing with a glusterd of the host and die together;
//   - per node, network namespace fvglN-<node> holds eth0 with 10.213.N.(10+i)/24,
//     a veth whose other end, pN-i in fvglN-srv, is a port of br0; CutOff
//     takes that port down (the node's packets are dropped both ways, as
//     when a cable is pulled), Restore brings it up;
//   - the node's client is `glusterfs -N` started through nsenter with only
//     the network namespace entered: its FUSE mount is in the test's (the
//     host's) mount namespace, at /tmp/fvgl/N/mnt/<node>;
//   - the brick is /tmp/fvgl/N/brick: a file F of the volume is
//     BrickDir()/F on the host, which tells what reached the server.
//
// Nothing exists in the host's network namespace: the veths are created in
// fvglN-srv and their node ends moved straight into the node's namespace.
//
// Clean-up: t.Cleanup unmounts, kills the processes the harness started (by
// PID: its children, and the processes inside its own namespaces), deletes
// its namespaces and removes /tmp/fvgl/N. Each slot is held with flock on
// /tmp/fvgl/slot-N.lock; Start first cleans every slot whose lock it can
// take (a killed earlier run's), so leftovers never pile up, and never
// touches a slot a live process holds.
//
// Start skips the test (t.Skip, with the reason) when it does not run as
// root, when a program is missing (hack/install-deps.sh installs them), when
// /dev/fuse is missing, or when network namespaces cannot be made. A server
// that is there but fails to start fails the test.
package gluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

const (
	// Base holds the slot directories and their lock files.
	Base = "/tmp/fvgl"
	// Prefix starts every name the harness gives: namespaces fvglN-*,
	// the directory /tmp/fvgl.
	Prefix = "fvgl"
	// maxSlots bounds the Clusters running at once on the machine.
	maxSlots = 32
	// netPrefix is the private range used: 10.213.N.0/24 for slot N. Nothing
	// else on the machine uses 10.213.0.0/16, and these addresses exist only
	// inside the harness's namespaces.
	netPrefix = "10.213"
	// volName is the volume's name.
	volName = "fvgl"
	// maxNodes bounds the nodes of one Cluster (their addresses are
	// 10.213.N.10 and up).
	maxNodes = 200
)

// Options configures the volume.
type Options struct {
	// PingTimeout sets network.ping-timeout (the clients' ping to the
	// brick; after it a client declares the server gone and fails its
	// pending calls). 0 keeps GlusterFS's default, 42 s. Whole seconds.
	PingTimeout time.Duration
	// Set lists more `gluster volume set` options, applied in order before
	// the volume starts, as {key, value} pairs.
	Set [][2]string
	// TLS encrypts the I/O path (client.ssl and server.ssl on, with a CA
	// and a certificate the harness makes in the slot's directory: tls.go).
	// Its options are applied before Set's. The management connection
	// stays in clear.
	TLS bool
}

// Cluster is one running server and its nodes (procs.Nodes: MountNode,
// CutOff, Restore, KillClient, ClientPID, NodeAddr).
type Cluster struct {
	*procs.Nodes

	// held is the slot the cluster runs in (its directory, its server's
	// namespace and address).
	held procs.Held
	tls  bool

	server *procs.Proc

	// StartDuration is how long Start took (slot sweep included).
	StartDuration time.Duration
}

// Start makes the server and its volume, started, and registers their
// teardown with t.Cleanup. Nodes are added with MountNode.
func Start(t testing.TB, opts ...Options) *Cluster {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	begin := time.Now()
	requirePrograms(t)
	held, err := slots.Take(t.Logf)
	if err != nil {
		t.Fatalf("gluster: %v", err)
	}
	c := &Cluster{held: held}
	c.Nodes = procs.NewNodes(procs.NodesConfig{Harness: "gluster", Slots: slots, Slot: held.Slot, Max: maxNodes,
		Mount: c.mount, ClientLog: c.clientLog})
	t.Cleanup(func() {
		start := time.Now()
		if err := c.teardown(); err != nil {
			t.Errorf("gluster: teardown: %v", err)
		}
		t.Logf("gluster: slot %d torn down in %v", c.held.Slot, time.Since(start).Round(time.Millisecond))
	})
	err = slots.Prepare(held.Slot, "run", "lib", "log", "brick", "mnt")
	if errors.Is(err, procs.ErrNoNetns) {
		t.Skipf("gluster: %v", err)
	}
	if err != nil {
		t.Fatalf("gluster: %v", err)
	}
	netDone := time.Now()
	if err := c.startServer(); err != nil {
		t.Fatalf("gluster: %v\n%s", err, procs.Tail(filepath.Join(c.held.Dir, "log", "glusterd.log"), 20))
	}
	serverUp := time.Now()
	if o.TLS {
		files, err := makeTLS(c.held.Dir)
		if err != nil {
			t.Fatalf("gluster: %v", err)
		}
		o.Set, c.tls = append(tlsSettings(files), o.Set...), true
	}
	if err := c.createVolume(o); err != nil {
		t.Fatalf("gluster: %v\n%s", err, procs.Tail(filepath.Join(c.held.Dir, "log", "glusterd.log"), 20))
	}
	c.StartDuration = time.Since(begin)
	t.Logf("gluster: volume %s on %s:%s (tls %v) started in %v (slot %d; sweep and network %v, glusterd %v, volume %v)",
		volName, c.held.Addr, c.BrickDir(), c.tls, c.StartDuration.Round(time.Millisecond), held.Slot,
		netDone.Sub(begin).Round(time.Millisecond), serverUp.Sub(netDone).Round(time.Millisecond), time.Since(serverUp).Round(time.Millisecond))
	return c
}

// requirePrograms skips t unless it runs as root with every program and
// /dev/fuse the harness needs.
func requirePrograms(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("gluster: needs root (network namespaces, glusterd, FUSE mounts)")
	}
	if missing := procs.NotInstalled("glusterd", "glusterfs", "gluster", "ip", "nsenter", "unshare", "sh"); len(missing) > 0 {
		t.Skipf("gluster: missing %s: run hack/install-deps.sh (glusterfs-server, glusterfs-client)", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("gluster: no FUSE: %v", err)
	}
}

// TLS reports whether the volume's I/O path runs over TLS (Options.TLS).
func (c *Cluster) TLS() bool { return c.tls }

// Addr is the server's address (the brick's host in the volume).
func (c *Cluster) Addr() string { return c.held.Addr }

// Volume is the volume's name.
func (c *Cluster) Volume() string { return volName }

// BrickDir is the brick's directory on the host: a file F of the volume is
// BrickDir()/F there, and what it holds is what reached the server.
func (c *Cluster) BrickDir() string { return filepath.Join(c.held.Dir, "brick") }

// Dir is the slot's directory, /tmp/fvgl/N; tests may make scratch
// directories under it (what is mounted under it is unmounted at teardown).
func (c *Cluster) Dir() string { return c.held.Dir }

// LogDir holds glusterd's, the brick's and every client's logs.
func (c *Cluster) LogDir() string { return filepath.Join(c.held.Dir, "log") }

// ServerNetns is the path of the server's network namespace, where the
// bridge br0 carries every packet between the nodes and the server.
func (c *Cluster) ServerNetns() string { return filepath.Join(procs.NetnsDir, c.held.ServerNS) }
