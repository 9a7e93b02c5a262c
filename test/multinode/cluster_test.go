// Package multinode runs filevol as one controller process and two or three
// node processes (each with its own node ID and kubelet directory) on ONE
// shared pool, and proves what a shared pool promises across nodes:
// attach and detach, Multi-Attach refused, force-detach, and fencing of a
// node that is dead, cut off, or whose filevol died under a writing pod.
//
// Every test runs on two filesystems, and the fencing tests on a third:
//
//   - local: one directory that every process opens (the kernel holds every
//     "node"'s OFD locks and loop devices);
//   - gluster: a one-brick GlusterFS volume (internal/testutil/gluster),
//     mounted once per process by a FUSE client in that process's own
//     network namespace, so that killing a node's client or cutting its
//     veth is what a dead or partitioned node does to the pool. The volume
//     runs with client.strict-locks on and short timeouts
//     (docs/shared-pools-glusterfs.md). With FILEVOL_GLUSTER_TLS=1 the
//     volume runs with TLS on its I/O path (client.ssl, server.ssl);
//   - ceph: a CephFS (internal/testutil/ceph, one cluster for the
//     package, started by the first test that asks), mounted once per
//     process by ceph-fuse in that process's own network namespace, each
//     test's pool in a directory of its own. Killing a node's client,
//     cutting its link, and evicting or blocklisting its client (the
//     test acting as the cluster's admin) are what a dead, partitioned or
//     fenced node is (fencing_ceph_test.go); the controller evicts a
//     node's client itself when given the cluster's credentials
//     (fencing_evict_test.go: the controller runs in its client's network
//     namespace, to reach the cluster). make test runs
//     TestFencingNodeBlocklisted and TestFencingNodeDeadEvictedByController
//     on it; -ceph (make ceph-long) adds ceph to TestFencingNodeDead,
//     TestFencingNodePartitioned and
//     TestFencingNodeFilevolKilledWhileWriting, and runs
//     TestFencingNodeEvictedOnAttach.
//
// What reached the storage is read where the storage keeps it: the pool
// directory (local), the brick (gluster), or a ceph-fuse client of the
// test's own (ceph: the cluster keeps files as RADOS objects), never
// through a node.
//
// Root only; skips otherwise, and gluster and ceph skip without their
// programs.
package multinode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/internal/testutil/gluster"
	"github.com/filevol/filevol/test/kubesim"
	"github.com/filevol/filevol/test/proc"
)

const poolName = "shared-multi"

// backends are the filesystems every test runs on.
var backends = []string{"local", "gluster"}

// quickStrict: the client sees the other clients' changes at once
// (md-cache and quick-read off: see clientArgs); the server notices a silent client in ~5 s (TCP keepalive
// 2 s + 3 probes of 1 s, user timeout 5 s), clients give up on the server
// after 5 s, and a client never reopens a locked fd without its lock
// (client.strict-locks on), the one setting under which fencing holds on
// GlusterFS (docs/shared-pools-glusterfs.md).
func quickStrict(strict bool) gluster.Options {
	o := gluster.Options{PingTimeout: 5 * time.Second, Set: [][2]string{
		{"server.keepalive-time", "2"}, {"server.keepalive-interval", "1"},
		{"server.keepalive-count", "3"}, {"server.tcp-user-timeout", "5"},
		{"performance.stat-prefetch", "off"}, {"performance.quick-read", "off"},
	}}
	if strict {
		o.Set = append(o.Set, [2]string{"client.strict-locks", "on"})
	}
	return o
}

// cluster is a controller process and node processes on one shared pool.
type cluster struct {
	t       *testing.T
	backend string
	dir     string // scratch: kubelet directories, sockets, logs
	bin     string
	g       *gluster.Cluster // nil on local and ceph
	cph     *ceph.Cluster    // nil on local and gluster
	cephDir string           // ceph: the test's directory in the CephFS
	// storage is the pool as the storage holds it: the pool directory
	// (local), the pool directory inside the brick (gluster), or the pool
	// as a client of the test's own mounts it (ceph).
	storage string
	ctrlP   *proc.Proc
	// ctrlPool is the pool as the controller sees it.
	ctrlPool string
	ctrl     csipb.ControllerClient
	nodes    map[string]*node
	// unsafe are the processes' extra flags: on a volume without
	// client.strict-locks, filevol starts only when told to accept it.
	unsafe []string
}

// node is one node: kubelet there (its name, its filevol's client, its
// paths for one volume), the node's view of the pool and its filevol
// process.
type node struct {
	kubesim.Node
	pool, kubelet string
	c             *cluster
	p             *proc.Proc
}

// newCluster starts a controller and the named nodes on a new shared pool
// of backend; strict applies to gluster (client.strict-locks). With
// FILEVOL_GLUSTER_TLS=1 every gluster volume runs with TLS on its I/O path
// (the stories over TLS).
func newCluster(t *testing.T, backend string, strict bool, nodes ...string) *cluster {
	t.Helper()
	return newClusterWith(t, clusterOptions{backend: backend, strict: strict, tls: envTLS()}, nodes...)
}

// envTLS reports whether FILEVOL_GLUSTER_TLS asks for TLS.
func envTLS() bool { return os.Getenv("FILEVOL_GLUSTER_TLS") == "1" }

// clusterOptions are newClusterWith's: tls and started apply to gluster;
// started runs once the volume is up, before any node mounts it (a
// capture that must see the connections from their first byte starts
// there).
type clusterOptions struct {
	backend     string
	strict, tls bool
	started     func(*gluster.Cluster)
}

func newClusterWith(t *testing.T, o clusterOptions, nodes ...string) *cluster {
	t.Helper()
	testutil.RequireRoot(t)
	c := &cluster{t: t, backend: o.backend, nodes: map[string]*node{}}
	if o.backend == "gluster" && !o.strict {
		c.unsafe = []string{"--shared-pool-unsafe-allow=strict-locks"}
	}
	if o.backend == "gluster" {
		opts := quickStrict(o.strict)
		opts.TLS = o.tls
		c.g = gluster.Start(t, opts)
		c.storage = filepath.Join(c.g.BrickDir(), "pool")
		if o.started != nil {
			o.started(c.g)
		}
	}
	if o.backend == "ceph" {
		c.startCeph()
	}
	c.dir = testutil.Scratch(t, "multinode")
	c.bin = proc.BuildDriver(t)
	if c.g == nil && c.cph == nil {
		c.storage = filepath.Join(c.dir, "pool")
	}
	// Registered after gluster.Start, so it runs before the volume's
	// teardown: a loop device or mount left by a fenced node is removed
	// while its client mount still exists.
	t.Cleanup(c.cleanKernel)
	c.ctrlPool = c.poolFor("ctrl")
	c.ctrlP = c.start("ctrl", "controller", c.ctrlPool, c.dir)
	c.ctrl = csipb.NewControllerClient(c.ctrlP.Conn)
	for _, n := range nodes {
		c.addNode(n)
	}
	return c
}

// poolFor is the pool directory as the process name sees it: the shared
// directory (local) or the pool in name's own client mount (gluster,
// ceph).
func (c *cluster) poolFor(name string) string {
	var p string
	switch {
	case c.cph != nil:
		p = c.cephPool(name)
	case c.g == nil:
		return filepath.Join(c.dir, "pool")
	default:
		p = filepath.Join(c.g.MountNode(c.t, name, clientArgs...), "pool")
		if err := os.MkdirAll(p, 0o750); err != nil {
			c.t.Fatal(err)
		}
	}
	// Runs before this node's client goes (cleanups run last first). Its
	// removal detaches the loop devices on its files; a bind of such a
	// device's node under c.dir (a fenced node's staging and target) left
	// until cleanKernel would then name a free device number, which a test
	// running beside this one attached next and took for its own volume's
	// (sanity's NodeUnstageVolume refused: "still published at" this
	// test's node-a, once in make test).
	c.t.Cleanup(func() { c.unmountUnder(c.dir) })
	return p
}

func (c *cluster) start(name, mode, pool, kubelet string) *proc.Proc {
	c.t.Helper()
	return c.startAs(name, name, mode, pool, kubelet)
}

// startAs starts the process name (its socket and log) as node nodeID.
func (c *cluster) startAs(name, nodeID, mode, pool, kubelet string) *proc.Proc {
	c.t.Helper()
	// proc.Start passes --pool-dir <dir>/pool; the later flag wins.
	args := append([]string{"--mode", mode, "--pool-shared", "--pool-name", poolName,
		"--node-id", nodeID, "--kubelet-dir", kubelet, "--pool-dir", pool}, c.unsafe...)
	if c.cph != nil {
		// The check of a ceph-fuse client reads its admin socket, which
		// the harness keeps in its own directory.
		args = append(args, "--ceph-admin-socket-dir", c.cph.RunDir())
		if mode == "controller" {
			// Where its client reaches the cluster, as on its host: an
			// eviction runs the ceph CLI (fencing_evict_test.go).
			return proc.StartIn(c.t, c.cph.NodeNetns(c.t, name), c.bin, c.dir, name, args...)
		}
	}
	return proc.Start(c.t, c.bin, c.dir, name, args...)
}

func (c *cluster) addNode(name string) *node {
	c.t.Helper()
	n := &node{Node: kubesim.Node{Name: name}, c: c, pool: c.poolFor(name), kubelet: filepath.Join(c.dir, name)}
	if err := os.MkdirAll(n.kubelet, 0o750); err != nil {
		c.t.Fatal(err)
	}
	n.Staging, n.Target = filepath.Join(n.kubelet, "staging"), filepath.Join(n.kubelet, "target")
	n.restart()
	c.nodes[name] = n
	return n
}

// restart starts the node's filevol (again).
func (n *node) restart() {
	n.p = n.c.start(n.Name, "node", n.pool, n.kubelet)
	n.Client = csipb.NewNodeClient(n.p.Conn)
}

// kill SIGKILLs the node's filevol: the kernel keeps its loop devices and
// mounts, as it does for a pod's writes.
func (n *node) kill() {
	n.c.t.Helper()
	if err := n.p.Cmd.Process.Kill(); err != nil {
		n.c.t.Fatal(err)
	}
	<-n.p.Exited
}

// cleanKernel removes what a fenced or dead node left in the kernel: the
// mounts under the scratch directory and the loop devices on images of
// this test's pool (its own directory or its gluster slot), and no other.
func (c *cluster) cleanKernel() {
	c.unmountUnder(c.dir)
	for _, d := range c.loops() {
		if err := loop.DetachFile(d.BackingFile); err != nil {
			c.t.Logf("detach %s (%s): %v", d.Path, d.BackingFile, err)
		}
	}
}

var ctx = context.Background()

var (
	blockCap = kubesim.BlockCapability()
	ext4Cap  = kubesim.FilesystemCapability("ext4")
)

// create makes a 64 MiB volume for capability vc and returns its ID.
func (c *cluster) create(name string, vc *csipb.VolumeCapability) string {
	c.t.Helper()
	r, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{vc},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}})
	if err != nil {
		c.t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return r.GetVolume().GetVolumeId()
}

func (c *cluster) publish(id, nodeID string, vc *csipb.VolumeCapability) (map[string]string, error) {
	r, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeID, VolumeCapability: vc})
	return r.GetPublishContext(), err
}

func (c *cluster) mustPublish(id, nodeID string, vc *csipb.VolumeCapability) map[string]string {
	c.t.Helper()
	pc, err := c.publish(id, nodeID, vc)
	if err != nil {
		c.t.Fatalf("ControllerPublishVolume %s to %s: %v", id, nodeID, err)
	}
	return pc
}

func (c *cluster) unpublish(id, nodeID string) {
	c.t.Helper()
	if _, err := c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeID}); err != nil {
		c.t.Fatalf("ControllerUnpublishVolume %s from %s: %v", id, nodeID, err)
	}
}

// image is the volume's image as the storage holds it.
func (c *cluster) image(id string) string { return filepath.Join(c.storage, "volumes", id+".img") }

// wantCode fails unless err has code and a message holding every part.
func wantCode(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s = %v, want %s", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s = %v, want a message naming %q", what, err, p)
		}
	}
}

// checkKernel: no mount under the scratch directory, no loop device on an
// image of this test's pool.
func (c *cluster) checkKernel() {
	c.t.Helper()
	table, err := mount.Read()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, m := range table.Under(c.dir) {
		c.t.Errorf("mount left at %s (%s)", m.MountPoint, m.Source)
	}
	for _, d := range c.loops() {
		c.t.Errorf("loop device %s left on %s", d.Path, d.BackingFile)
	}
}

// loops lists the loop devices on images of this test's pool.
func (c *cluster) loops() []loop.Device {
	roots := []string{c.dir + "/"}
	if c.g != nil {
		roots = append(roots, c.g.Dir()+"/")
	}
	devs, err := loop.List()
	if err != nil {
		c.t.Fatal(err)
	}
	var out []loop.Device
	for _, d := range devs {
		if c.cph != nil && c.cephImage(d.BackingFile) {
			out = append(out, d)
			continue
		}
		for _, r := range roots {
			if strings.HasPrefix(d.BackingFile, r) {
				out = append(out, d)
			}
		}
	}
	return out
}

// unmountUnder lazily unmounts every mount under dir, deepest first.
func (c *cluster) unmountUnder(dir string) {
	table, err := mount.Read()
	if err != nil {
		c.t.Logf("read mounts: %v", err)
		return
	}
	ms := table.Under(dir)
	for i := len(ms) - 1; i >= 0; i-- {
		if err := unix.Unmount(ms[i].MountPoint, unix.MNT_DETACH); err != nil {
			c.t.Logf("unmount %s: %v", ms[i].MountPoint, err)
		}
	}
}

// clientArgs mount every node's client without the kernel's 1 s entry
// and attribute caches. With them (or with the volume's md-cache and
// quick-read on), a controller read a record another had replaced by
// rename less than a second before: a detach not seen, ESTALE
// (TestTwoControllersRaceForOneVolume failed at its first round, 3 runs
// of 3). docs/shared-pools-glusterfs.md makes both a requirement.
var clientArgs = gluster.CoherentClientArgs
