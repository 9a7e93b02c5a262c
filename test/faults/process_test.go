package faults

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/filevol/filevol/internal/testutil/ceph"
	procs "github.com/filevol/filevol/test/proc"
)

// nodeID is the node the driver under test claims to be.
const nodeID = "faults-node"

// buildDriver returns the driver binary: -bin when given (`make faults`
// passes bin/filevol, which `make build` made), else cmd/filevol built
// once for the whole package (procs.BuildDriver; linking it took 3-6 s, per
// test, when each built its own).
func buildDriver(t testing.TB) string {
	t.Helper()
	if *binFlag != "" {
		bin, err := filepath.Abs(*binFlag)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("-bin: %v", err)
		}
		return bin
	}
	return procs.BuildDriver(t)
}

func TestMain(m *testing.M) {
	flag.Parse()
	// ceph.Main runs the tests and tears down the CephFS cluster of the
	// -ceph tests, if one was started.
	os.Exit(procs.Cleanup(ceph.Main(m)))
}

// proc is the driver running as a child process, as kubelet runs it in a
// container: PID 1 of its own PID namespace (mount namespace and
// everything else shared), so that SIGKILL takes everything it runs with
// it — mkfs, blkid, resize2fs, which run in process groups of their own —
// exactly as when a container dies.
type proc struct {
	t                             testing.TB
	bin, dir, pool, kubelet, sock string
	logPath                       string
	// extraArgs follow the driver's arguments (a later flag wins): the
	// shared-pool tests run controllers and nodes on one pool.
	extraArgs []string

	mu     sync.Mutex // serializes start, kill and stop
	cur    atomic.Pointer[instance]
	starts int
	// downSince is when the last driver was found gone (gone); read by
	// down without mu.
	downSince atomic.Pointer[time.Time]

	conn     *grpc.ClientConn
	ctrl     csipb.ControllerClient
	node     csipb.NodeClient
	identity csipb.IdentityClient
}

// newProc prepares (does not start) a driver on dir/pool, serving
// dir/csi.sock, with staging and target paths confined to dir/kubelet.
func newProc(t testing.TB, bin, dir string) *proc {
	t.Helper()
	p := &proc{
		t: t, bin: bin, dir: dir,
		pool: filepath.Join(dir, "pool"), kubelet: filepath.Join(dir, "kubelet"),
		sock: filepath.Join(dir, "csi.sock"), logPath: filepath.Join(dir, "driver.log"),
	}
	if err := os.MkdirAll(p.kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	// Reconnect quickly after a restart: the default backoff grows to two
	// minutes, far longer than a sidecar would wait for a restarted driver.
	conn, err := grpc.NewClient("unix://"+p.sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	p.conn = conn
	p.ctrl, p.node, p.identity = csipb.NewControllerClient(conn), csipb.NewNodeClient(conn), csipb.NewIdentityClient(conn)
	t.Cleanup(func() {
		p.kill()
		conn.Close()
	})
	return p
}

// start starts the driver and waits until Probe answers. A driver that
// exited although the harness did not kill it is not started again: start
// returns how it died, so that the test fails with the cause.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.cur.Load(); i != nil {
		return i.died()
	}
	log, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	p.starts++
	fmt.Fprintf(log, "\n==== start %d at %s ====\n", p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, append([]string{"--endpoint", "unix://" + p.sock, "--pool-dir", p.pool,
		"--node-id", nodeID, "--kubelet-dir", p.kubelet, "--v", "2"}, p.extraArgs...)...)
	cmd.Stdout, cmd.Stderr = log, log
	// Every goroutine in the dump that SIGQUIT (diagnose) or a crash prints.
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	// PID 1 of a new PID namespace: when it dies, the kernel kills every
	// process in the namespace and reaps them before the driver's own exit
	// is reported. Killed with the test should the test process die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	i, err := launch(cmd, p.starts, p.logPath)
	if err != nil {
		return err
	}
	p.cur.Store(i)

	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.identity.Probe(ctx, &csipb.ProbeRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			return nil
		}
		if i.exited() {
			p.gone()
			return fmt.Errorf("%w; log:\n%s", i.died(), p.logTail())
		}
		if time.Now().After(deadline) {
			diag := i.diagnose("not ready after 20s") // which ends it
			p.gone()
			return fmt.Errorf("driver not ready after 20s: %v\n%s", err, diag)
		}
	}
}

// kill sends SIGKILL to the driver (and so to its PID namespace) and waits
// for it to be gone. It reports whether a driver was running.
func (p *proc) kill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.cur.Load()
	if i == nil {
		return false
	}
	i.kill("the harness (restart or reboot)")
	// Wait returns once the namespace is empty: the kernel kills and reaps
	// every process in it before the init's exit is reported.
	<-i.done
	p.gone()
	return true
}

// gone records that no driver runs; under mu, the current one reaped.
func (p *proc) gone() {
	p.cur.Store(nil)
	now := time.Now()
	p.downSince.Store(&now)
}

// current is the driver started last and not yet killed by kill, nil when
// none; it may have exited. Read without mu: the kill-point watcher and
// the killers act while start or kill waits.
func (p *proc) current() *instance { return p.cur.Load() }

// killNow SIGKILLs the current driver, if any, without waiting; why says
// who kills it, for the report should a test then fail.
func (p *proc) killNow(why string) {
	if i := p.current(); i != nil {
		i.kill(why)
	}
}

// downGrace is how long calls may find no driver before a step gives up:
// the harness restarts a driver it killed within a second or two (a
// simulated reboot included); a driver still down after this will not
// come back.
const downGrace = 30 * time.Second

// down returns why no driver can answer and none will, nil while one runs
// or one is being restarted: the current driver exited though the harness
// did not kill it, or no driver has run for downGrace. A step that
// retries UNAVAILABLE stops at once on it instead of dialling a dead
// socket until its timeout.
func (p *proc) down() error {
	i := p.current()
	switch {
	case i == nil:
		if since := p.downSince.Load(); since != nil && time.Since(*since) > downGrace {
			return fmt.Errorf("no driver has run for %s: the harness killed the last one and did not start another", time.Since(*since).Round(time.Second))
		}
	case !i.exited():
	case i.killedBy() == "" || time.Since(i.exitedAt) > downGrace:
		return i.died()
	}
	return nil
}

// diagnose describes the current driver when a step timed out; see
// instance.diagnose.
func (p *proc) diagnose(why string) string {
	i := p.current()
	if i == nil {
		return "no driver running"
	}
	return i.diagnose(why)
}

// stop stops the driver the way Kubernetes does (SIGTERM), for the end.
func (p *proc) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.cur.Load()
	if i == nil {
		return nil
	}
	if i.exited() {
		p.gone()
		return fmt.Errorf("before SIGTERM: %w", i.died())
	}
	i.signal(syscall.SIGTERM, "SIGTERM from the harness (stop)")
	var err error
	select {
	case <-i.done:
	case <-time.After(40 * time.Second):
		err = fmt.Errorf("driver still running 40s after SIGTERM\n%s", i.diagnose("still running 40s after SIGTERM"))
		i.kill("the harness, 40s after SIGTERM")
		<-i.done
	}
	if st := i.state; err == nil && !st.Success() {
		err = fmt.Errorf("driver exited with %v after SIGTERM", st)
	}
	p.gone()
	return err
}

// logTail returns the last lines of the driver's log.
func (p *proc) logTail() string {
	data, _ := os.ReadFile(p.logPath)
	const max = 4000
	if len(data) > max {
		data = data[len(data)-max:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return string(data)
}
