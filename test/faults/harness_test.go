package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil"
)

// Tests of the harness itself: a kill point must kill the driver it was
// armed for and no other, and a driver that dies must fail the test at
// once with its cause, not be dialled until a step times out.

// sleeper starts a stand-in for the driver: a process that runs until
// killed.
func sleeper(t *testing.T, n int) *instance {
	t.Helper()
	i, err := launch(exec.Command("sleep", "600"), n, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { i.kill("cleanup"); <-i.done })
	return i
}

func waitExit(t *testing.T, i *instance) {
	t.Helper()
	select {
	case <-i.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("start %d still running 10s after its kill point", i.n)
	}
}

// TestWatcherKillsOnlyTheDriverItWasArmedFor replays the sequence that
// killed a restarted driver under load: a kill point fired, but the test
// had already taken the call's end for "fewer boundaries than armed" and
// restarted the driver; the late fire was then taken by the next case for
// its own, which restarted the driver while its own arming stayed live,
// and that arming killed the driver started after it as soon as the
// retried call touched the pool.
func TestWatcherKillsOnlyTheDriverItWasArmedFor(t *testing.T) {
	dir := t.TempDir()
	pool, kubelet := filepath.Join(dir, "pool"), filepath.Join(dir, "kubelet")
	for _, d := range []string{pool, kubelet} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	var cur atomic.Pointer[instance]
	w, err := watchKillPoints(pool, kubelet, newStats(), cur.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	n := 0
	boundary := func() { // two boundaries: created, written
		n++
		if err := os.WriteFile(filepath.Join(pool, "step-"+string(rune('a'+n))), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// A fire nobody took.
	a := sleeper(t, 1)
	cur.Store(a)
	w.armNth(1)
	boundary()
	waitExit(t, a)
	if why := a.killedBy(); !strings.Contains(why, "watcher") {
		t.Errorf("start 1 killed by %q, want the watcher", why)
	}
	b := sleeper(t, 2)
	cur.Store(b)
	w.armNth(3)
	select {
	case p := <-w.fired:
		t.Errorf("after arming for start 2, fired holds %q, the fire of the arming for start 1: the waiter would take it for its own and restart the driver while its point stays armed", p)
	default:
	}

	// An arming whose driver the harness killed, then a new driver.
	b.kill("the test")
	<-b.done
	c := sleeper(t, 3)
	cur.Store(c)
	boundary()
	boundary()
	w.drain()
	if err := c.died(); err != nil {
		t.Errorf("a point armed for start 2 killed start 3: %v", err)
	}
	select {
	case p := <-w.fired:
		t.Errorf("a point armed for start 2 fired at %q after start 2 was gone", p)
	default:
	}

	// And a point armed for the running driver kills it.
	w.armNth(2)
	boundary()
	select {
	case p := <-w.fired:
		waitExit(t, c)
		if err := c.died(); err == nil || !strings.Contains(err.Error(), `signalled by the watcher, at the kill point "pool step-`) {
			t.Errorf("start 3 killed at %q: died says %v", p, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a point armed for the running driver did not fire in 10s")
	}
}

// TestInstanceSaysWhoKilledIt: a kill by the harness carries its reason;
// any other death says that the harness did not cause it.
func TestInstanceSaysWhoKilledIt(t *testing.T) {
	a := sleeper(t, 1)
	if err := a.died(); err != nil {
		t.Fatalf("running: %v", err)
	}
	a.kill("the test's kill")
	<-a.done
	if err := a.died(); err == nil || !strings.Contains(err.Error(), "signal: killed; signalled by the test's kill") {
		t.Errorf("killed by the harness: %v", err)
	}
	b := sleeper(t, 2)
	_ = syscall.Kill(b.pid, syscall.SIGKILL) // as an outside killer would
	<-b.done
	if err := b.died(); err == nil || !strings.Contains(err.Error(), "signal: killed; the harness did not signal it") {
		t.Errorf("killed from outside: %v", err)
	}
}

// TestDeadDriverFailsAtOnce: the driver killed behind the harness's back
// ends the next step at once, saying how it died, where the step used to
// dial the dead socket until stepTimeout (3 minutes); start and stop say
// it too.
func TestDeadDriverFailsAtOnce(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	p := newProc(t, buildDriver(t), dir)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	o := &ops{p: p, st: newStats()}
	v := newVolume(dir, "dead-driver", "ext4")
	if err := o.create(v, nil); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(p.current().pid, syscall.SIGKILL)
	began := time.Now()
	err := o.delete(v)
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "died") || !strings.Contains(err.Error(), "signal: killed; the harness did not signal it") {
		t.Errorf("DeleteVolume on a dead driver: %v", err)
	}
	if took > 10*time.Second {
		t.Errorf("DeleteVolume on a dead driver took %s to fail", took)
	}
	t.Logf("DeleteVolume on a dead driver failed after %s: %v", took.Round(time.Millisecond), err)
	if err := p.start(); err == nil || !strings.Contains(err.Error(), "did not signal it") {
		t.Errorf("start after the driver died: %v", err)
	}
	if err := p.stop(); err == nil || !strings.Contains(err.Error(), "before SIGTERM") {
		t.Errorf("stop after the driver died: %v", err)
	}
	if !strings.Contains(p.logTail(), "==== start 1 (pid") {
		t.Errorf("the driver's log does not say that it exited:\n%s", p.logTail())
	}
	// The next driver on the same pool starts: nothing above is stuck.
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := o.delete(v); err != nil {
		t.Error(err)
	}
	if err := p.stop(); err != nil {
		t.Error(err)
	}
}

// TestStepTimeoutDumpsTheDriver: a step that times out returns the
// kernel stacks of the driver's processes and its goroutine dump.
func TestStepTimeoutDumpsTheDriver(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	p := newProc(t, buildDriver(t), dir)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	o := &ops{p: p, st: newStats(), attemptTimeout: 300 * time.Millisecond, stepTimeout: 2 * time.Second}
	// A stopped driver accepts connections and answers nothing: a hang.
	if err := p.current().process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err := o.create(newVolume(dir, "hung-driver", "ext4"), nil)
	if err == nil {
		t.Fatal("CreateVolume on a stopped driver succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"no success in 2s", "kernel stacks of the 1 processes in the driver's PID namespace",
		"thread ", "goroutine dump of driver start 1", "SIGQUIT: quit", "goroutine 1 ", "main.main("} {
		if !strings.Contains(msg, want) {
			t.Errorf("the timeout's error lacks %q:\n%s", want, msg)
		}
	}
	if err := p.current().died(); err == nil || !strings.Contains(err.Error(), "signalled by SIGQUIT for a goroutine dump") {
		t.Errorf("after the dump: %v", err)
	}
}

// TestOpenGuardKillsBeforeTheOpen: the guard's kill lands while the
// kernel holds the armed process's open, so the process never gets the
// file; anyone else's opens on the mount go through meanwhile.
func TestOpenGuardKillsBeforeTheOpen(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "guard-test", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("read by the guarded process"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[instance]
	g, err := guardMount(mnt, cur.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	var out strings.Builder
	// exec: cat is the process launched, so its opens carry its PID.
	cmd := exec.Command("sh", "-c", "sleep 0.5; exec cat "+filepath.Join(mnt, "f"))
	cmd.Stdout = &out
	i, err := launch(cmd, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(i)
	g.arm(1)
	if data, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || len(data) == 0 {
		t.Errorf("the test's own read while the guard is armed for another process: %q, %v", data, err)
	}
	waitExit(t, i)
	if why := i.killedBy(); !strings.Contains(why, "open guard, at #1 open f") {
		t.Errorf("cat killed by %q, want the open guard at its open", why)
	}
	if out.Len() != 0 {
		t.Errorf("cat read %q: the kill came after its open", out.String())
	}
	if evs := g.events(); len(evs) != 1 || evs[0].rel != "f" || evs[0].close {
		t.Errorf("the guard saw %v, want one open of f", evs)
	}
}
