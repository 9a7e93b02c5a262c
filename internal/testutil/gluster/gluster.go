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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
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
	// netnsDir is where `ip netns` keeps its named namespaces.
	netnsDir = "/run/netns"
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
}

// Cluster is one running server and its nodes.
type Cluster struct {
	slot  int
	dir   string
	lock  *os.File
	srvNS string
	addr  string

	server     *exec.Cmd
	serverDone chan struct{}

	mu    sync.Mutex
	nodes map[string]*node
	next  int

	// StartDuration is how long Start took (slot sweep included).
	StartDuration time.Duration
}

type node struct {
	name, ns, port, addr, mnt, log string
	cmd                            *exec.Cmd
	done                           chan struct{}
	gone                           bool
}

var nodeName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,19}$`)

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
	slot, lock, err := takeSlot(t)
	if err != nil {
		t.Fatalf("gluster: %v", err)
	}
	c := &Cluster{
		slot:  slot,
		lock:  lock,
		dir:   filepath.Join(Base, strconv.Itoa(slot)),
		srvNS: fmt.Sprintf("%s%d-srv", Prefix, slot),
		addr:  fmt.Sprintf("%s.%d.1", netPrefix, slot),
		nodes: map[string]*node{},
	}
	t.Cleanup(func() {
		start := time.Now()
		if err := c.teardown(); err != nil {
			t.Errorf("gluster: teardown: %v", err)
		}
		t.Logf("gluster: slot %d torn down in %v", c.slot, time.Since(start).Round(time.Millisecond))
	})
	for _, d := range []string{"run", "lib", "log", "brick", "mnt"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			t.Fatalf("gluster: %v", err)
		}
	}
	if err := addNetns(c.srvNS); err != nil {
		t.Skipf("gluster: cannot make a network namespace here: %v", err)
	}
	if err := ipRun("-n", c.srvNS, "link", "set", "lo", "up"); err != nil {
		t.Fatalf("gluster: %v", err)
	}
	// A fixed MAC: a bridge without one takes its lowest port's, and
	// removing that port (a node's teardown) changes it under the other
	// nodes' ARP caches: their packets to the server were lost for 7-27 s.
	mac := fmt.Sprintf("02:66:76:67:%02x:01", slot)
	if err := ipRun("-n", c.srvNS, "link", "add", "br0", "address", mac, "type", "bridge"); err != nil {
		t.Fatalf("gluster: %v", err)
	}
	if err := ipRun("-n", c.srvNS, "addr", "add", c.addr+"/24", "dev", "br0"); err != nil {
		t.Fatalf("gluster: %v", err)
	}
	if err := ipRun("-n", c.srvNS, "link", "set", "br0", "up"); err != nil {
		t.Fatalf("gluster: %v", err)
	}
	netDone := time.Now()
	if err := c.startServer(); err != nil {
		t.Fatalf("gluster: %v\n%s", err, tail(filepath.Join(c.dir, "log", "glusterd.log"), 20))
	}
	serverUp := time.Now()
	if err := c.createVolume(o); err != nil {
		t.Fatalf("gluster: %v\n%s", err, tail(filepath.Join(c.dir, "log", "glusterd.log"), 20))
	}
	c.StartDuration = time.Since(begin)
	t.Logf("gluster: volume %s on %s:%s started in %v (slot %d; sweep and network %v, glusterd %v, volume %v)",
		volName, c.addr, c.BrickDir(), c.StartDuration.Round(time.Millisecond), slot,
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
	var missing []string
	for _, p := range []string{"glusterd", "glusterfs", "gluster", "ip", "nsenter", "unshare", "sh"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Skipf("gluster: missing %s: run hack/install-deps.sh (glusterfs-server, glusterfs-client)", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("gluster: no FUSE: %v", err)
	}
}

// Addr is the server's address (the brick's host in the volume).
func (c *Cluster) Addr() string { return c.addr }

// Volume is the volume's name.
func (c *Cluster) Volume() string { return volName }

// BrickDir is the brick's directory on the host: a file F of the volume is
// BrickDir()/F there, and what it holds is what reached the server.
func (c *Cluster) BrickDir() string { return filepath.Join(c.dir, "brick") }

// Dir is the slot's directory, /tmp/fvgl/N; tests may make scratch
// directories under it (what is mounted under it is unmounted at teardown).
func (c *Cluster) Dir() string { return c.dir }

// LogDir holds glusterd's, the brick's and every client's logs.
func (c *Cluster) LogDir() string { return filepath.Join(c.dir, "log") }

// glusterdVol is the management volume file; as Debian's, with the working
// directory under the harness's bind mount and IPv4 only.
const glusterdVol = `volume management
    type mgmt/glusterd
    option working-directory /var/lib/glusterd
    option transport-type socket
    option transport.socket.listen-port 24007
    option transport.address-family inet
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
end-volume
`

const fakeGsyncd = `#!/bin/sh
case " $* " in *" --version "*) echo "gsyncd.py (filevol test harness stand-in)";; esac
exit 0
`

// startServer starts glusterd in the server's network namespace, in a new
// PID namespace (whose init is a shell: it reaps the brick processes, which
// daemonize and so become its children; glusterd as init did not, and took
// a killed brick's zombie for a running brick) and a private mount
// namespace whose /run, /var/lib/glusterd and /var/log/glusterfs are the
// slot's directories. Everything in the PID namespace dies with its init.
// The harness's child is unshare (with --kill-child), whose namespaces the
// CLI enters.
func (c *Cluster) startServer() error {
	vol := filepath.Join(c.dir, "glusterd.vol")
	if err := os.WriteFile(vol, []byte(glusterdVol), 0o644); err != nil {
		return err
	}
	// glusterd's start runs the geo-replication helper (gsyncd, Python)
	// several times: 2 s of a 2.5 s start on a loaded machine. In this mount
	// namespace only, gsyncd is a shell script that answers --version as
	// glusterd wants and does nothing else (glusterd refuses to start
	// with a gsyncd that fails); the tests use no geo-replication.
	noGsyncd := filepath.Join(c.dir, "no-gsyncd")
	if err := os.WriteFile(noGsyncd, []byte(fakeGsyncd), 0o755); err != nil {
		return err
	}
	// The new mount namespace starts as a copy of the host's, with every
	// mount other software has there: other tests' filesystems on loop
	// devices, a cluster's volumes. A copy keeps such a filesystem, and so
	// its loop device, busy ("mounted or claimed exclusively") for as long
	// as glusterd runs, and their owners' unmount-and-detach fails. So the
	// first thing the namespace does is drop, lazily and deepest first,
	// every mount glusterd does not need: all but /, /proc, /sys, /dev and
	// the mounts that hold the slot's directory.
	script := fmt.Sprintf(`set -e
awk '{print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
  case "$m" in
    /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) ;;
    *) case %[1]s/ in "$m"/*) ;; *) umount -l "$m" 2>/dev/null || true ;; esac ;;
  esac
done
mount --bind %[1]s/run /run
mount --bind %[1]s/lib /var/lib/glusterd
mount --bind %[1]s/log /var/log/glusterfs
libexec=$(glusterfs --print-libexecdir)
if [ -e "$libexec/gsyncd" ]; then mount --bind %[1]s/no-gsyncd "$libexec/gsyncd"; fi
glusterd -N -f %[1]s/glusterd.vol -l /var/log/glusterfs/glusterd.log -p /run/glusterd.pid &
wait $!`, c.dir)
	for _, d := range []string{"/var/lib/glusterd", "/var/log/glusterfs"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	out, err := os.Create(filepath.Join(c.dir, "log", "server.out"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("nsenter", "--net="+filepath.Join(netnsDir, c.srvNS), "--",
		"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc",
		"--", "sh", "-c", script)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start glusterd: %w", err)
	}
	c.server = cmd
	c.serverDone = make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.serverDone) }()
	c.recordPID(cmd.Process.Pid, "server")
	sock := filepath.Join(c.dir, "run", "glusterd.socket")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			if _, err := c.cli(context.Background(), "volume", "list"); err == nil {
				return nil
			}
		}
		select {
		case <-c.serverDone:
			return fmt.Errorf("glusterd exited: %v\n%s", cmd.ProcessState, tail(filepath.Join(c.dir, "log", "server.out"), 10))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("glusterd did not answer in 30 s")
		}
	}
}

// createVolume creates the one-brick volume (force: the brick is on the
// root filesystem), applies the options and starts it, then waits until the
// brick is online.
func (c *Cluster) createVolume(o Options) error {
	ctx := context.Background()
	if _, err := c.cli(ctx, "volume", "create", volName, c.addr+":"+c.BrickDir(), "force"); err != nil {
		return err
	}
	set := slices.Clone(o.Set)
	if o.PingTimeout > 0 {
		set = append([][2]string{{"network.ping-timeout", strconv.Itoa(int(o.PingTimeout.Round(time.Second) / time.Second))}}, set...)
	}
	for _, kv := range set {
		if _, err := c.cli(ctx, "volume", "set", volName, kv[0], kv[1]); err != nil {
			return err
		}
	}
	if _, err := c.cli(ctx, "volume", "start", volName); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.cli(ctx, "volume", "status", volName, "--xml")
		if err == nil && brickOnline(out) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("brick not online after 30 s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// brickOnline reports whether `volume status --xml` shows the brick with
// status 1 and a port.
func brickOnline(xml string) bool {
	i := strings.Index(xml, "<node>")
	if i < 0 {
		return false
	}
	n := xml[i:]
	return strings.Contains(n, "<status>1</status>") && !strings.Contains(n, "<port>N/A</port>")
}

// Gluster runs the gluster CLI against this server and returns its output;
// a failure fails t.
func (c *Cluster) Gluster(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.cli(t.Context(), args...)
	if err != nil {
		t.Fatalf("gluster: %v", err)
	}
	return out
}

// SetOption sets a volume option on the running volume.
func (c *Cluster) SetOption(t testing.TB, key, value string) {
	t.Helper()
	c.Gluster(t, "volume", "set", volName, key, value)
}

// cli runs `gluster --mode=script ARGS` in the server's mount, network and
// PID namespaces (where /run/glusterd.socket is the harness's).
func (c *Cluster) cli(ctx context.Context, args ...string) (string, error) {
	if c.server == nil || c.server.Process == nil {
		return "", errors.New("no server")
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	pid := strconv.Itoa(c.server.Process.Pid)
	// The PID namespace too: that mount namespace's /proc is the PID
	// namespace's, where a process from outside has no /proc/self (the CLI
	// crashes on it).
	full := append([]string{"-t", pid, "-m", "-n", "--pid=/proc/" + pid + "/ns/pid_for_children", "--", "gluster", "--mode=script",
		"--log-file=/var/log/glusterfs/cli.log"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("gluster %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

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
		t.Fatalf("gluster: node %s: %v\n%s", name, err, tail(n.log, 20))
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

	if err := addNetns(n.ns); err != nil {
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
		if err := ipRun(s...); err != nil {
			return n, err
		}
	}
	return n, os.MkdirAll(n.mnt, 0o755)
}

// mount starts the node's FUSE client (`glusterfs -N`, our child, in the
// node's network namespace only) and waits until the volume answers at the
// mount point.
func (c *Cluster) mount(n *node, clientArgs []string) error {
	args := []string{"--net=" + filepath.Join(netnsDir, n.ns), "--",
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
	c.recordPID(cmd.Process.Pid, "client-"+n.name)
	deadline := time.Now().Add(30 * time.Second)
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
			return errors.New("volume not mounted after 30 s")
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
		err = ipRun("-n", c.srvNS, "link", "set", n.port, "down")
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
		err = ipRun("-n", c.srvNS, "link", "set", n.port, "up")
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

// RestartBrick kills the brick process (SIGKILL, as a crash would) and
// starts it again (`gluster volume start VOL force`), waiting until it is
// online. The server forgets every lock the brick held; clients reconnect.
func (c *Cluster) RestartBrick(t testing.TB) {
	t.Helper()
	var bricks []int
	for _, pid := range pidsInNetns(filepath.Join(netnsDir, c.srvNS)) {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "glusterfsd" {
			bricks = append(bricks, pid)
		}
	}
	if len(bricks) != 1 {
		t.Fatalf("gluster: brick processes in %s: %v, want one", c.srvNS, bricks)
	}
	if err := killAndWait(bricks); err != nil {
		t.Fatalf("gluster: kill brick: %v", err)
	}
	c.Gluster(t, "volume", "start", volName, "force")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.cli(t.Context(), "volume", "status", volName, "--xml")
		if err == nil && brickOnline(out) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gluster: brick not online 30 s after its restart: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
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
	_ = ipRun("-n", c.srvNS, "link", "set", n.port, "up")
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
	if err := delNetns(n.ns); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

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
	if err := cleanSlot(c.slot); err != nil {
		errs = append(errs, err)
	}
	_ = c.lock.Close()
	return errors.Join(errs...)
}

// takeSlot sweeps every slot whose lock is free (cleaning what a killed run
// left there) and keeps the first one, locked.
func takeSlot(t testing.TB) (int, *os.File, error) {
	if err := os.MkdirAll(Base, 0o755); err != nil {
		return 0, nil, err
	}
	kept := -1
	var keptLock *os.File
	for slot := range maxSlots {
		lockPath := filepath.Join(Base, fmt.Sprintf("slot-%d.lock", slot))
		f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return 0, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // a live process holds it
			continue
		}
		if err := cleanSlot(slot); err != nil {
			t.Logf("gluster: cleaning slot %d left by an earlier run: %v", slot, err)
			f.Close()
			continue
		}
		if kept < 0 {
			kept, keptLock = slot, f
		} else {
			f.Close()
		}
	}
	if kept < 0 {
		return 0, nil, fmt.Errorf("no free slot of %d under %s", maxSlots, Base)
	}
	return kept, keptLock, nil
}

// cleanSlot removes whatever slot's owner left: the processes in its
// namespaces and those it recorded (checked by start time, so a reused PID
// is left alone), its mounts and loop devices under /tmp/fvgl/N, the
// directory and its namespaces. The caller holds the slot's lock.
func cleanSlot(slot int) error {
	dir := filepath.Join(Base, strconv.Itoa(slot))
	nsPrefix := fmt.Sprintf("%s%d-", Prefix, slot)
	var nss []string
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), nsPrefix) {
				nss = append(nss, e.Name())
			}
		}
	}
	pids := recordedPIDs(dir)
	for _, ns := range nss {
		pids = append(pids, pidsInNetns(filepath.Join(netnsDir, ns))...)
	}
	var errs []error
	if err := killAndWait(pids); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(dir); err == nil {
		if err := testutil.CleanLeftovers(dir); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range nss {
		if err := delNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pidRecord is one line of /tmp/fvgl/N/pids: "PID STARTTIME ROLE".
func (c *Cluster) recordPID(pid int, role string) {
	st, err := startTime(pid)
	if err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(c.dir, "pids"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%d %d %s\n", pid, st, role)
}

// recordedPIDs returns the recorded PIDs that still name the same process.
func recordedPIDs(dir string) []int {
	f, err := os.Open(filepath.Join(dir, "pids"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var pids []int
	s := bufio.NewScanner(f)
	for s.Scan() {
		var pid int
		var st uint64
		if _, err := fmt.Sscan(s.Text(), &pid, &st); err != nil {
			continue
		}
		if now, err := startTime(pid); err == nil && now == st {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startTime is field 22 of /proc/PID/stat (clock ticks since boot).
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("bad stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// pidsInNetns lists the processes whose network namespace is the one bound
// at path (as `ip netns pids` does).
func pidsInNetns(path string) []int {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAndWait sends SIGKILL to pids and waits (5 s at most) until none is
// left but zombies.
func killAndWait(pids []int) error {
	slices.Sort(pids)
	pids = slices.Compact(pids)
	for _, p := range pids {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var alive []int
		for _, p := range pids {
			if running(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still running after SIGKILL", alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}

func addNetns(name string) error { return ipRun("netns", "add", name) }

// delNetns deletes a named namespace; a missing one is not an error.
func delNetns(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return ipRun("netns", "delete", name)
}

func ipRun(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// tail returns the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return path + ":\n" + strings.Join(lines, "\n")
}
