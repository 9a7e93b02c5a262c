package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// stopTimeout is longer than the driver's own 30 s shutdown grace, so a
// driver that honours SIGTERM is never killed by the harness.
const stopTimeout = 45 * time.Second

// driverProc is one bin/filevol child process serving a pool on a unix
// socket. The harness talks to it only through gRPC, as kubelet would.
type driverProc struct {
	cmd    *exec.Cmd
	socket string
	conn   *grpc.ClientConn
	ctrl   csipb.ControllerClient
	node   csipb.NodeClient
	ident  csipb.IdentityClient
	// ready is the time from fork to the first successful Probe.
	ready time.Duration
	done  chan struct{} // closed once the process has been reaped
	state *os.ProcessState
}

// startDriver starts bin on poolDir and waits until it answers Probe.
// Staging and target paths must lie inside kubeletDir, as in production.
func startDriver(ctx context.Context, bin, socket, poolDir, kubeletDir, logPath string, verbosity int, env []string, extra ...string) (*driverProc, error) {
	argv := []string{bin, "--endpoint", "unix://" + socket, "--pool-dir", poolDir,
		"--node-id", "bench", "--kubelet-dir", kubeletDir, "--v", strconv.Itoa(verbosity)}
	return startProc(ctx, append(argv, extra...), socket, logPath, env)
}

// startProc starts argv, a CSI driver serving socket, and waits until it
// answers Probe. Its output goes to logPath.
func startProc(ctx context.Context, argv []string, socket, logPath string, env []string) (*driverProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	bin := argv[0]
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	// If the harness is killed, the driver must not outlive it holding
	// loop devices and mounts; the next run's CleanLeftovers handles the rest.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	logf.Close() // the child holds its own copy
	d := &driverProc{cmd: cmd, socket: socket, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); d.state = cmd.ProcessState; close(d.done) }()

	conn, err := dial(socket)
	if err != nil {
		d.kill()
		return nil, err
	}
	d.conn = conn
	d.ctrl, d.node, d.ident = csipb.NewControllerClient(conn), csipb.NewNodeClient(conn), csipb.NewIdentityClient(conn)
	if err := d.waitReady(ctx, 20*time.Second, logPath); err != nil {
		d.kill()
		return nil, err
	}
	d.ready = time.Since(start)
	return d, nil
}

// dial opens a gRPC connection to the unix socket (connected lazily).
// The reconnect backoff starts at 5 ms, not gRPC's 1 s: a Probe made just
// before the driver listens would otherwise add a second to its start time.
func dial(socket string) (*grpc.ClientConn, error) {
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = 5*time.Millisecond, 100*time.Millisecond
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}))
}

// waitReady polls Probe: the socket appears before Serve accepts, and the
// pool is opened (index loaded) before the socket exists.
func (d *driverProc) waitReady(ctx context.Context, limit time.Duration, logPath string) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-d.done:
			return fmt.Errorf("driver exited during start (%v); log %s:\n%s", d.state, logPath, tail(logPath, 20))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := d.ident.Probe(cctx, &csipb.ProbeRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("driver not ready after %v: %v; log %s:\n%s", limit, err, logPath, tail(logPath, 20))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits. It reports the exit code and how long the
// shutdown took; a driver still running after stopTimeout is killed and
// that is an error.
func (d *driverProc) stop() (code int, took time.Duration, err error) {
	if d.conn != nil {
		d.conn.Close()
	}
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return -1, 0, err
	}
	select {
	case <-d.done:
	case <-time.After(stopTimeout):
		d.kill()
		return -1, time.Since(start), fmt.Errorf("driver still running %v after SIGTERM; killed", stopTimeout)
	}
	return d.state.ExitCode(), time.Since(start), nil
}

func (d *driverProc) kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// memory is what /proc/<pid>/status says about the driver, in KiB.
type memory struct{ rssKiB, hwmKiB int64 }

func (m memory) String() string {
	return fmt.Sprintf("VmRSS %.1f MiB (VmHWM %.1f MiB)", float64(m.rssKiB)/1024, float64(m.hwmKiB)/1024)
}

// mb is VmRSS in MiB, the unit of the targets.
func (m memory) mb() float64 { return float64(m.rssKiB) / 1024 }

func (d *driverProc) memory() (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v) // "12345 kB"
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			m.rssKiB = n
		case "VmHWM":
			m.hwmKiB = n
		}
	}
	if m.rssKiB == 0 {
		return m, fmt.Errorf("no VmRSS for pid %d", d.cmd.Process.Pid)
	}
	return m, sc.Err()
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
