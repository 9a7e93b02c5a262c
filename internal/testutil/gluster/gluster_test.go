package gluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// TestHarness: two nodes see one volume; a cut-off node's port is down and
// comes back; a killed client leaves a dead mount; teardown leaves no
// namespace, mount, process or directory behind.
func TestHarness(t *testing.T) {
	var slot int
	var dir string
	var pids []int
	t.Run("run", func(t *testing.T) {
		g := Start(t, Options{PingTimeout: 5 * time.Second})
		slot, dir = g.held.Slot, g.Dir()
		a := g.MountNode(t, "node-a")
		b := g.MountNode(t, "node-b")
		if err := os.WriteFile(filepath.Join(a, "hello"), []byte("from a"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b, "hello"))
		if err != nil || string(got) != "from a" {
			t.Fatalf("read through node-b: %q, %v", got, err)
		}
		onBrick, err := os.ReadFile(filepath.Join(g.BrickDir(), "hello"))
		if err != nil || string(onBrick) != "from a" {
			t.Fatalf("brick: %q, %v", onBrick, err)
		}
		// Each client runs in its node's network namespace.
		for _, name := range []string{"node-a", "node-b"} {
			ns := filepath.Join(procs.NetnsDir, fmt.Sprintf("%s%d-%s", Prefix, slot, name))
			pid := g.ClientPID(t, name)
			if !containsInt(procs.InNetns(ns), pid) {
				t.Errorf("%s's client %d is not in %s", name, pid, ns)
			}
			pids = append(pids, pid)
		}
		pids = append(pids, procs.InNetns(filepath.Join(procs.NetnsDir, g.held.ServerNS))...)
		if len(pids) < 4 { // 2 clients, glusterd, the brick (and unshare is outside: in the host's)
			t.Errorf("processes: %v, want 2 clients and glusterd and its brick", pids)
		}
		pids = append(pids, g.server.Cmd.Process.Pid)

		g.CutOff(t, "node-a")
		if up := linkUp(t, g.held.ServerNS, "p0"); up {
			t.Errorf("node-a's port is up after CutOff")
		}
		g.Restore(t, "node-a")
		if up := linkUp(t, g.held.ServerNS, "p0"); !up {
			t.Errorf("node-a's port is down after Restore")
		}
		if _, err := os.ReadFile(filepath.Join(a, "hello")); err != nil {
			t.Errorf("read through node-a after Restore: %v", err)
		}

		// A node removed (here: node-c, at its subtest's end) leaves the
		// bridge's MAC alone, so the others' ARP entries stay right and
		// their next call is answered at once.
		t.Run("node-c", func(t *testing.T) { g.MountNode(t, "node-c") })
		if out, err := exec.Command("ip", "-n", g.held.ServerNS, "-o", "link", "show", "br0").CombinedOutput(); err != nil ||
			!strings.Contains(string(out), fmt.Sprintf("02:66:76:67:%02x:01", slot)) {
			t.Errorf("bridge after a node's removal: %s %v", out, err)
		}
		time.Sleep(1100 * time.Millisecond) // past the FUSE attribute timeout
		start := time.Now()
		if _, err := os.Stat(filepath.Join(a, "hello")); err != nil || time.Since(start) > time.Second {
			t.Errorf("stat through node-a after node-c left: %v in %v", err, time.Since(start))
		}

		g.KillClient(t, "node-b")
		if _, err := os.Stat(filepath.Join(b, "hello")); !errors.Is(err, unix.ENOTCONN) {
			t.Errorf("stat through node-b after its client died: %v, want ENOTCONN", err)
		}
	})
	assertSlotClean(t, slot, dir, pids)
}

// TestStartSweepsAKilledRun: a test process killed with its cluster up
// leaves namespaces, processes and mounts; the next Start removes them.
func TestStartSweepsAKilledRun(t *testing.T) {
	if os.Getenv("FVGL_HELPER") == "1" {
		g := Start(t)
		g.MountNode(t, "node-a")
		fmt.Printf("ready %d %d\n", g.held.Slot, g.server.Cmd.Process.Pid)
		time.Sleep(time.Minute) // killed before
		return
	}
	requirePrograms(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartSweepsAKilledRun$", "-test.v")
	cmd.Env = append(os.Environ(), "FVGL_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var slot, server int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "ready %d %d", &slot, &server); err == nil {
			break
		}
	}
	if server == 0 {
		t.Fatalf("helper did not start a cluster")
	}
	dir := filepath.Join(Base, strconv.Itoa(slot))
	ns := fmt.Sprintf("%s%d-", Prefix, slot)
	pids := append(procs.InNetns(filepath.Join(procs.NetnsDir, ns+"srv")), procs.InNetns(filepath.Join(procs.NetnsDir, ns+"node-a"))...)
	pids = append(pids, server)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	go func() { _, _ = bufio.NewReader(out).WriteTo(devNull{}) }()
	if !mounted(filepath.Join(dir, "mnt", "node-a")) {
		t.Fatalf("the killed run left no mount: nothing to sweep")
	}

	t.Run("sweep", func(t *testing.T) {
		start := time.Now()
		g := Start(t)
		t.Logf("Start with a sweep: %v (slot %d, swept slot %d)", time.Since(start).Round(time.Millisecond), g.held.Slot, slot)
		// Whether or not the new cluster reuses the slot, the killed run's
		// processes, mounts and node namespace are gone now.
		for _, p := range pids {
			if procs.Running(p) {
				t.Errorf("process %d of the killed run still running", p)
			}
		}
		if ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir)); err != nil || len(ms) > 0 {
			t.Errorf("mounts of the killed run left under %s: %d (%v)", dir, len(ms), err)
		}
		if _, err := os.Stat(filepath.Join(procs.NetnsDir, ns+"node-a")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %snode-a of the killed run left: %v", ns, err)
		}
	})
	assertSlotClean(t, slot, dir, pids)
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

// assertSlotClean checks that nothing of slot is left.
func assertSlotClean(t *testing.T, slot int, dir string, pids []int) {
	t.Helper()
	if dir == "" {
		t.Fatal("no cluster ran")
	}
	if ents, err := os.ReadDir(procs.NetnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), fmt.Sprintf("%s%d-", Prefix, slot)) {
				t.Errorf("namespace %s left", e.Name())
			}
		}
	}
	if ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir)); err != nil || len(ms) > 0 {
		t.Errorf("mounts left under %s: %d (%v)", dir, len(ms), err)
	}
	for _, p := range pids {
		if procs.Running(p) {
			t.Errorf("process %d left running", p)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left: %v", dir, err)
	}
}

func mounted(dir string) bool {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	return err == nil && len(ms) > 0
}

func linkUp(t *testing.T, ns, link string) bool {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", link).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show: %v: %s", err, out)
	}
	s := string(out)
	return strings.Contains(s, ",UP") || strings.Contains(s, "<UP")
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestServerHoldsNoForeignMounts: the server's mount namespace starts as a
// copy of the host's; a filesystem on a loop device that another test has
// mounted when the server starts must not stay mounted in that copy, or
// its owner's unmount leaves the filesystem alive and the loop device
// busy ("mounted or claimed exclusively") for as long as glusterd runs.
func TestServerHoldsNoForeignMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	foreign := t.TempDir()
	if err := unix.Mount("fvgl-foreign", foreign, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(foreign, unix.MNT_DETACH) })
	g := Start(t, Options{})
	for _, pid := range procs.InNetns(filepath.Join(procs.NetnsDir, g.held.ServerNS)) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			continue // exited meanwhile
		}
		if strings.Contains(string(data), " "+foreign+" ") {
			t.Errorf("process %d of the server still has %s mounted in its mount namespace", pid, foreign)
		}
	}
}
