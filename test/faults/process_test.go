package faults

import (
	"bytes"
	"context"
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
)

// nodeID is the node the driver under test claims to be.
const nodeID = "faults-node"

// buildDriver builds cmd/filevol into dir, unless -bin names a binary
// (`make faults` passes bin/filevol, which `make build` made).
func buildDriver(t testing.TB, dir string) string {
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
	bin := filepath.Join(dir, "filevol")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/filevol/filevol/cmd/filevol")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/filevol: %v\n%s", err, out)
	}
	return bin
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

	mu     sync.Mutex
	cmd    *exec.Cmd
	curPID atomic.Int64 // the running driver's PID, 0 when none; read without mu
	exited chan struct{}
	starts int

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

// start starts the driver and waits until Probe answers.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	log, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	p.starts++
	fmt.Fprintf(log, "\n==== start %d at %s ====\n", p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, "--endpoint", "unix://"+p.sock, "--pool-dir", p.pool,
		"--node-id", nodeID, "--kubelet-dir", p.kubelet, "--v", "2")
	cmd.Stdout, cmd.Stderr = log, log
	// PID 1 of a new PID namespace: when it dies, the kernel kills every
	// process in the namespace and reaps them before the driver's own exit
	// is reported. Killed with the test should the test process die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	p.curPID.Store(int64(cmd.Process.Pid))

	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.identity.Probe(ctx, &csipb.ProbeRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			p.cmd = nil
			p.curPID.Store(0)
			return fmt.Errorf("driver exited during start (%v); log:\n%s", cmd.ProcessState, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("driver not ready after 20s: %v; log:\n%s", err, p.logTail())
		}
	}
}

// kill sends SIGKILL to the driver's process group and waits for it to be
// gone. It reports whether a driver was running.
func (p *proc) kill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
	// Wait returns once the namespace is empty: the kernel kills and reaps
	// every process in it before the init's exit is reported.
	<-p.exited
	p.cmd = nil
	p.curPID.Store(0)
	return true
}

// pid is the driver's process ID, 0 when it is not running.
func (p *proc) pid() int { return int(p.curPID.Load()) }

// killPID kills the driver (and so its PID namespace); for the
// kill-point watcher, which must act without waiting on p.mu.
func killPID(pid int) {
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// stop stops the driver the way Kubernetes does (SIGTERM), for the end.
func (p *proc) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	err := error(nil)
	if st := p.cmd.ProcessState; st != nil && !st.Success() {
		err = fmt.Errorf("driver exited with %v after SIGTERM", st)
	}
	p.cmd = nil
	p.curPID.Store(0)
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
