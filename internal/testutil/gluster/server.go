package gluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// readyTimeout bounds each wait for glusterd, a brick or a client mount to
// come up. They take a second or two on a quiet machine; under make test's
// parallel -race builds and other tests' clusters they have taken over 30 s,
// and a slow start is not what the gluster tests test.
const readyTimeout = 2 * time.Minute

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
	vol := filepath.Join(c.held.Dir, "glusterd.vol")
	if err := os.WriteFile(vol, []byte(glusterdVol), 0o644); err != nil {
		return err
	}
	// glusterd's start runs the geo-replication helper (gsyncd, Python)
	// several times: 2 s of a 2.5 s start on a loaded machine. In this mount
	// namespace only, gsyncd is a shell script that answers --version as
	// glusterd wants and does nothing else (glusterd refuses to start
	// with a gsyncd that fails); the tests use no geo-replication.
	noGsyncd := filepath.Join(c.held.Dir, "no-gsyncd")
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
wait $!`, c.held.Dir)
	for _, d := range []string{"/var/lib/glusterd", "/var/log/glusterfs"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	server, err := procs.Spawn(c.held.Dir, "server", c.held.ServerNS, filepath.Join(c.held.Dir, "log", "server.out"),
		"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc",
		"--", "sh", "-c", script)
	if err != nil {
		return err
	}
	c.server = server
	sock := filepath.Join(c.held.Dir, "run", "glusterd.socket")
	deadline := time.Now().Add(readyTimeout)
	for {
		if _, err := os.Stat(sock); err == nil {
			if _, err := c.cli(context.Background(), "volume", "list"); err == nil {
				return nil
			}
		}
		select {
		case <-server.Done:
			return fmt.Errorf("glusterd exited: %v\n%s", server.Cmd.ProcessState, procs.Tail(filepath.Join(c.held.Dir, "log", "server.out"), 10))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("glusterd did not answer in %v", readyTimeout)
		}
	}
}

// createVolume creates the one-brick volume (force: the brick is on the
// root filesystem), applies the options and starts it, then waits until the
// brick is online.
func (c *Cluster) createVolume(o Options) error {
	ctx := context.Background()
	if _, err := c.cli(ctx, "volume", "create", volName, c.held.Addr+":"+c.BrickDir(), "force"); err != nil {
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
	deadline := time.Now().Add(readyTimeout)
	for {
		out, err := c.cli(ctx, "volume", "status", volName, "--xml")
		if err == nil && brickOnline(out) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("brick not online after %v: %v\n%s", readyTimeout, err, out)
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
	if c.server == nil {
		return "", errors.New("no server")
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	pid := strconv.Itoa(c.server.Cmd.Process.Pid)
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

// RestartBrick kills the brick process (SIGKILL, as a crash would) and
// starts it again (`gluster volume start VOL force`), waiting until it is
// online. The server forgets every lock the brick held; clients reconnect.
func (c *Cluster) RestartBrick(t testing.TB) {
	t.Helper()
	var bricks []int
	for _, pid := range procs.InNetns(filepath.Join(procs.NetnsDir, c.held.ServerNS)) {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "glusterfsd" {
			bricks = append(bricks, pid)
		}
	}
	if len(bricks) != 1 {
		t.Fatalf("gluster: brick processes in %s: %v, want one", c.held.ServerNS, bricks)
	}
	if err := procs.KillAndWait(bricks, 5*time.Second); err != nil {
		t.Fatalf("gluster: kill brick: %v", err)
	}
	c.Gluster(t, "volume", "start", volName, "force")
	deadline := time.Now().Add(readyTimeout)
	for {
		out, err := c.cli(t.Context(), "volume", "status", volName, "--xml")
		if err == nil && brickOnline(out) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gluster: brick not online %v after its restart: %v\n%s", readyTimeout, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BrickPort is the TCP port the brick listens on (from `volume status
// --xml`): the I/O path's port, where TLS records travel when the volume
// has TLS on; the management port is 24007.
func (c *Cluster) BrickPort(t testing.TB) int {
	t.Helper()
	out := c.Gluster(t, "volume", "status", volName, "--xml")
	i := strings.Index(out, "<node>")
	if i < 0 {
		t.Fatalf("gluster: no brick in volume status:\n%s", out)
	}
	n := out[i:]
	j := strings.Index(n, "<port>")
	k := strings.Index(n, "</port>")
	if j < 0 || k < j {
		t.Fatalf("gluster: no brick port in volume status:\n%s", out)
	}
	port, err := strconv.Atoi(n[j+len("<port>") : k])
	if err != nil {
		t.Fatalf("gluster: brick port %q: %v", n[j+len("<port>"):k], err)
	}
	return port
}
