// Package proc runs filevol binaries as child processes for tests that need
// several of them (a controller and nodes sharing a pool): it builds the
// binary, starts a process with its own socket and log, waits until it
// answers Probe, and stops it as Kubernetes would.
package proc

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

// Proc is one filevol process, started from the binary built for the test.
type Proc struct {
	Name, Sock, Log string
	Cmd             *exec.Cmd
	Exited          chan struct{}
	Conn            *grpc.ClientConn
}

// Start starts bin as the process name (its socket and log are
// dir/<name>.sock and .log) on the pool dir/pool, with args.
func Start(t *testing.T, bin, dir, name string, args ...string) *Proc {
	t.Helper()
	return StartIn(t, "", bin, dir, name, args...)
}

// StartIn is Start in the network namespace netns (a path under
// /run/netns; "" for this process's): nsenter enters it and executes the
// binary, whose PID stays the one started.
func StartIn(t *testing.T, netns, bin, dir, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Sock: filepath.Join(dir, name+".sock"), Log: filepath.Join(dir, name+".log")}
	logf, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	argv := append([]string{bin, "--endpoint", "unix://" + p.Sock, "--pool-dir", filepath.Join(dir, "pool"),
		"--gc-interval", "1h", "--v", "4"}, args...)
	if netns != "" {
		argv = append([]string{"nsenter", "--net=" + netns, "--"}, argv...)
	}
	p.Cmd = exec.Command(argv[0], argv[1:]...)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.Exited = make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(p.Exited) }()
	t.Cleanup(func() { p.Stop(t) })
	p.Conn, err = grpc.NewClient("unix://"+p.Sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := csipb.NewIdentityClient(p.Conn).Probe(ctx, &csipb.ProbeRequest{})
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.Exited:
			t.Fatalf("filevol %s exited during start (%v):\n%s", name, p.Cmd.ProcessState, p.LogText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("filevol %s not ready after 30s: %v\n%s", name, err, p.LogText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits; a process that does not stop in 40 s
// (the driver's own grace is 30 s) is killed and reported.
func (p *Proc) Stop(t *testing.T) {
	if p.Conn != nil {
		p.Conn.Close()
	}
	select {
	case <-p.Exited:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
		if !p.Cmd.ProcessState.Success() {
			t.Errorf("filevol %s exited with %v after SIGTERM:\n%s", p.Name, p.Cmd.ProcessState, p.LogText())
		}
	case <-time.After(40 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.Exited
		t.Errorf("filevol %s did not stop within 40 s of SIGTERM; killed", p.Name)
	}
}

func (p *Proc) LogText() string {
	data, _ := os.ReadFile(p.Log)
	return string(data)
}

// LogHas waits up to a second for a line holding every one of parts.
func (p *Proc) LogHas(parts ...string) bool { return p.WaitLog(time.Second, parts...) }

// WaitLog waits up to timeout for a line holding every one of parts: for
// what the driver does beside serving (a sweep at start), which a loaded
// machine may take many seconds to reach.
func (p *Proc) WaitLog(timeout time.Duration, parts ...string) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		for _, line := range strings.Split(p.LogText(), "\n") {
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

func (p *Proc) String() string { return fmt.Sprintf("filevol %s", p.Name) }
