package faults

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instance is one start of the driver: its process, how it ended, and
// whether the harness ended it. Kills go through the instance, never
// through a bare PID: a kill meant for one start can then never reach the
// next one, and a driver that dies is told apart from one the harness
// killed.
type instance struct {
	n       int // start number, as in the log's "==== start n" lines
	pid     int
	process *os.Process // signals go through its pidfd: no PID reuse
	logPath string
	done    chan struct{} // closed once the process is reaped
	// Set before done is closed.
	state    *os.ProcessState
	exitedAt time.Time

	mu     sync.Mutex
	why    string // what the harness signalled it for (the first reason); "" if it did not
	dumped bool   // diagnose sent SIGQUIT already
}

// launch starts cmd as start n of the driver; its exit is appended to
// logPath (which may be "").
func launch(cmd *exec.Cmd, n int, logPath string) (*instance, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	i := &instance{n: n, pid: cmd.Process.Pid, process: cmd.Process, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		i.state, i.exitedAt = cmd.ProcessState, time.Now()
		i.logExit()
		close(i.done)
	}()
	return i, nil
}

// exited reports whether the process has exited (and been reaped).
func (i *instance) exited() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

// signal sends sig, first recording why, so that the exit it causes is
// known to be the harness's doing.
func (i *instance) signal(sig syscall.Signal, why string) {
	i.mu.Lock()
	if i.why == "" {
		i.why = why
	}
	i.mu.Unlock()
	_ = i.process.Signal(sig) // os.ErrProcessDone once reaped
}

// kill sends SIGKILL for why, without waiting.
func (i *instance) kill(why string) { i.signal(syscall.SIGKILL, why) }

// killedBy is what the harness signalled the driver for, "" if nothing.
func (i *instance) killedBy() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.why
}

// died returns nil while the driver runs, else how it ended and who ended
// it.
func (i *instance) died() error {
	if !i.exited() {
		return nil
	}
	return fmt.Errorf("driver start %d (pid %d) died %s ago: %v; %s",
		i.n, i.pid, time.Since(i.exitedAt).Round(time.Millisecond), i.state, i.cause())
}

func (i *instance) cause() string {
	if why := i.killedBy(); why != "" {
		return "signalled by " + why
	}
	return "the harness did not signal it: something else killed it or it crashed " +
		"(a kill point armed for an earlier driver; the OOM killer, see dmesg; a panic, see its log)"
}

// logExit appends the exit to the driver's log, where the next start's
// lines would otherwise follow a killed driver's last line with no word
// of what happened in between.
func (i *instance) logExit() {
	if i.logPath == "" {
		return
	}
	f, err := os.OpenFile(i.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "==== start %d (pid %d) exited at %s: %v; %s ====\n",
		i.n, i.pid, i.exitedAt.Format(time.RFC3339Nano), i.state, i.cause())
}

// diagnose describes a driver that did not answer in time: the kernel
// stack of every thread in its PID namespace (where a driver or its mkfs
// blocked in the kernel waits), then its goroutine dump (SIGQUIT makes the
// Go runtime print it to the log and exit). The dump ends the driver: it
// is taken once; the test has failed anyway. A driver already gone is
// described by how it died.
func (i *instance) diagnose(why string) string {
	if err := i.died(); err != nil {
		return err.Error()
	}
	var b strings.Builder
	b.WriteString(kernelStacks(i.pid))
	i.mu.Lock()
	dumped := i.dumped
	i.dumped = true
	i.mu.Unlock()
	if dumped {
		b.WriteString("goroutine dump: taken already, at an earlier timeout\n")
		return b.String()
	}
	var off int64
	if st, err := os.Stat(i.logPath); err == nil {
		off = st.Size()
	}
	i.signal(syscall.SIGQUIT, "SIGQUIT for a goroutine dump ("+why+")")
	_ = i.process.Signal(syscall.SIGCONT) // a stopped driver handles nothing until continued
	select {
	case <-i.done:
	case <-time.After(10 * time.Second):
		b.WriteString("still running 10s after SIGQUIT: SIGKILL\n")
		i.kill("SIGKILL after an unanswered SIGQUIT")
		<-i.done
	}
	fmt.Fprintf(&b, "goroutine dump of driver start %d (pid %d), from its log:\n", i.n, i.pid)
	if f, err := os.Open(i.logPath); err == nil {
		if _, err := f.Seek(off, io.SeekStart); err == nil {
			_, _ = io.Copy(&b, f)
		}
		f.Close()
	}
	return b.String()
}

// kernelStacks returns /proc/<pid>/task/*/stack of every process in the
// PID namespace of pid: the driver and whatever it runs.
func kernelStacks(pid int) string {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return fmt.Sprintf("kernel stacks: %v\n", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Sprintf("kernel stacks: %v\n", err)
	}
	var pids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n)); err == nil && l == ns {
			pids = append(pids, n)
		}
	}
	slices.Sort(pids)
	var b strings.Builder
	fmt.Fprintf(&b, "kernel stacks of the %d processes in the driver's PID namespace (%s):\n", len(pids), ns)
	for _, n := range pids {
		dir := fmt.Sprintf("/proc/%d", n)
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		fmt.Fprintf(&b, "pid %d %s: %s\n", n, procState(dir), strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
		tasks, _ := filepath.Glob(dir + "/task/*")
		for _, task := range tasks {
			stack, err := os.ReadFile(task + "/stack")
			if err != nil {
				fmt.Fprintf(&b, "  thread %s: %v\n", filepath.Base(task), err)
				continue
			}
			fmt.Fprintf(&b, "  thread %s %s:\n", filepath.Base(task), procState(task))
			if len(strings.TrimSpace(string(stack))) == 0 {
				b.WriteString("    (empty: the kernel shows none for a running or stopped thread)\n")
			}
			for _, line := range strings.Split(strings.TrimSpace(string(stack)), "\n") {
				b.WriteString("    " + line + "\n")
			}
		}
	}
	return b.String()
}

// procState is the State: line of dir/status ("D (disk sleep)", ...).
func procState(dir string) string {
	data, _ := os.ReadFile(dir + "/status")
	for _, line := range strings.Split(string(data), "\n") {
		if s, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.TrimSpace(s)
		}
	}
	return "?"
}
