package split

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// nodeID is the node both processes serve: a node-local pool's controller
// is the controller of that node's pool.
const nodeID = "split-node"

// proc is one filevol process, started from the binary built for the test.
type proc struct {
	name, sock, log string
	cmd             *exec.Cmd
	exited          chan struct{}
	conn            *grpc.ClientConn
}

// buildDriver builds cmd/filevol once per test binary.
func buildDriver(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "filevol")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/filevol/filevol/cmd/filevol").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/filevol: %v\n%s", err, out)
	}
	return bin
}

// startProc starts bin in mode on the pool under dir and waits until it
// answers Probe; it fails at once, with its log, if the process dies.
func startProc(t *testing.T, bin, dir, mode string) *proc {
	t.Helper()
	return startNamed(t, bin, dir, mode, "--mode", mode, "--node-id", nodeID, "--kubelet-dir", dir)
}

// startNamed starts bin as the process name (its socket and log are
// dir/<name>.sock and .log) on the pool dir/pool, with args.
func startNamed(t *testing.T, bin, dir, name string, args ...string) *proc {
	t.Helper()
	mode := name
	p := &proc{name: name, sock: filepath.Join(dir, name+".sock"), log: filepath.Join(dir, name+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(bin, append([]string{"--endpoint", "unix://" + p.sock, "--pool-dir", filepath.Join(dir, "pool"),
		"--gc-interval", "1h", "--v", "4"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.stop(t) })
	p.conn, err = grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := csipb.NewIdentityClient(p.conn).Probe(ctx, &csipb.ProbeRequest{})
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("filevol --mode %s exited during start (%v):\n%s", mode, p.cmd.ProcessState, p.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("filevol --mode %s not ready after 30s: %v\n%s", mode, err, p.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits; a process that does not stop in 40 s
// (the driver's own grace is 30 s) is killed and reported.
func (p *proc) stop(t *testing.T) {
	if p.conn != nil {
		p.conn.Close()
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if !p.cmd.ProcessState.Success() {
			t.Errorf("filevol --mode %s exited with %v after SIGTERM:\n%s", p.name, p.cmd.ProcessState, p.logText())
		}
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("filevol --mode %s did not stop within 40 s of SIGTERM; killed", p.name)
	}
}

func (p *proc) logText() string {
	data, _ := os.ReadFile(p.log)
	return string(data)
}

// logHas waits up to a second for a line holding every one of parts.
func (p *proc) logHas(parts ...string) bool {
	for range 20 {
		for _, line := range strings.Split(p.logText(), "\n") {
			all := true
			for _, s := range parts {
				all = all && strings.Contains(line, s)
			}
			if all {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (p *proc) String() string { return fmt.Sprintf("filevol --mode %s", p.name) }
