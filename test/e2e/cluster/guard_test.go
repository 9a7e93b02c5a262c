//go:build linux

// Tests of the harness's guard: down.sh and up.sh must never touch a kubelet, a
// cgroup or a mount they did not create, since the machine may be a real
// Kubernetes node, and down.sh must still remove everything its ownership stamp
// ($STATE_DIR/pids and $STATE_DIR/owned) names. They run the real scripts, as
// root, against a state directory and a kubelet root of their own
// (FILEVOL_E2E_STATE, FILEVOL_E2E_KUBELET_ROOT) and fake programs (copies of
// sleep named kubelet); no cluster binary is needed, and nothing the tests did
// not make is touched.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// harness is one set of paths for the scripts, all under the test's temp dir.
type harness struct {
	dir, state, kroot string
	env               []string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the scripts mount, kill and make cgroups")
	}
	// Not t.TempDir: a mount that a failed test left must be unmounted before
	// the directory is removed.
	dir, err := os.MkdirTemp("", "fv-guard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(dir)
		os.RemoveAll(dir)
	})
	h := &harness{dir: dir, state: filepath.Join(dir, "state"), kroot: filepath.Join(dir, "kubelet")}
	for _, d := range []string{h.state, h.kroot, filepath.Join(dir, "logs"), filepath.Join(dir, "cache")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.env = append(os.Environ(),
		"FILEVOL_E2E_STATE="+h.state,
		"FILEVOL_E2E_KUBELET_ROOT="+h.kroot,
		"FILEVOL_E2E_LOGS="+filepath.Join(dir, "logs"),
		"FILEVOL_E2E_CACHE="+filepath.Join(dir, "cache"), // empty: up.sh finds no binary
		"FILEVOL_E2E_KEY=guard-test",
		"FILEVOL_E2E_GRACEFUL=0",
	)
	return h
}

// run runs one of the scripts and returns its exit code and output.
func (h *harness) run(t *testing.T, script string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = h.env
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", script, out)
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish in 60s", script)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// fakeKubelet starts a copy of sleep named kubelet, from its own directory, as
// a real node's kubelet or ours would show in /proc/PID/exe.
func (h *harness) fakeKubelet(t *testing.T, sub string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(h.dir, sub, "kubelet")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	sleep, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, sleep, 0o755); err != nil {
		t.Fatal(err)
	}
	return start(t, bin, "600")
}

func start(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// alive: running, not a zombie (the test, its parent, has not reaped it yet).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	return !strings.HasPrefix(s[strings.LastIndex(s, ")")+2:], "Z")
}

// startTime is field 22 of /proc/PID/stat, what lib.sh's record_pid records.
func startTime(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndex(s, ")")+2:])[19]
}

// hierarchy is a cgroup hierarchy to make test cgroups in: v1's pids (no
// cpuset setup needed), else the v2 root.
func hierarchy(t *testing.T) string {
	t.Helper()
	for _, h := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			return h
		}
	}
	t.Skip("no cgroup hierarchy to make test cgroups in")
	return ""
}

// mkCgroup makes DIR (and its parents) and removes what it made at the end,
// deepest first, after killing the test's processes in them.
func mkCgroup(t *testing.T, dir string) {
	t.Helper()
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range made {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, p := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(p); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			for i := 0; i < 50; i++ {
				if err := os.Remove(d); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
}

func enter(t *testing.T, cgroup string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func inCgroup(cgroup string, pid int) bool {
	b, _ := os.ReadFile(filepath.Join(cgroup, "cgroup.procs"))
	return slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid))
}

func mount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
}

// tmpfs mounts a tmpfs on DIR, as the kubelet would a pod's volume.
func tmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(t, "-t", "tmpfs", "fv-guard", dir)
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

func mounted(path string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && unescape(f[4]) == path {
			return true
		}
	}
	return false
}

func unescape(s string) string {
	for _, r := range [][2]string{{`\040`, " "}, {`\011`, "\t"}, {`\012`, "\n"}, {`\134`, `\`}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

// unmountUnder lazily unmounts what a failed test left under dir.
func unmountUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var ms []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			if m := unescape(f[4]); strings.HasPrefix(m, dir+"/") {
				ms = append(ms, m)
			}
		}
	}
	slices.SortFunc(ms, func(a, b string) int { return len(b) - len(a) })
	for _, m := range ms {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

// foreignNode makes what a real node's kubelet would have: the kubelet, in a
// /kubepods cgroup, and its pods' mounts under the kubelet root.
type foreignNode struct {
	kubelet *exec.Cmd
	cgroup  string
	mounts  []string
}

func (h *harness) foreignNode(t *testing.T) *foreignNode {
	t.Helper()
	f := &foreignNode{kubelet: h.fakeKubelet(t, "node-bin")}
	f.cgroup = filepath.Join(hierarchy(t), "kubepods", fmt.Sprintf("fv-guard-%d", f.kubelet.Process.Pid))
	mkCgroup(t, f.cgroup)
	enter(t, f.cgroup, f.kubelet.Process.Pid)
	for _, v := range []string{"pods/1111/volumes/kubernetes.io~csi/pvc-a/mount", "plugins/kubernetes.io/csi/x/globalmount"} {
		m := filepath.Join(h.kroot, v)
		tmpfs(t, m)
		f.mounts = append(f.mounts, m)
	}
	return f
}

// untouched: the node's kubelet still runs in its cgroup, its mounts are there.
func (f *foreignNode) untouched(t *testing.T) {
	t.Helper()
	pid := f.kubelet.Process.Pid
	if !alive(pid) {
		t.Errorf("the node's kubelet (pid %d) was killed", pid)
	} else if !inCgroup(f.cgroup, pid) {
		t.Errorf("the node's kubelet (pid %d) is no longer in its cgroup %s", pid, f.cgroup)
	}
	for _, m := range f.mounts {
		if !mounted(m) {
			t.Errorf("the node's mount %s was unmounted", m)
		}
	}
}

// named: the output names each of what.
func named(t *testing.T, out string, what ...string) {
	t.Helper()
	for _, w := range what {
		if !strings.Contains(out, w) {
			t.Errorf("the output does not name %q", w)
		}
	}
}

// A real node's kubelet, /kubepods cgroup and mounts under its kubelet root:
// down.sh leaves them all, and says so.
func TestDownLeavesAForeignNodeAlone(t *testing.T) {
	h := newHarness(t)
	f := h.foreignNode(t)
	code, out := h.run(t, "down.sh")
	if code != 0 {
		t.Errorf("down.sh exited %d", code)
	}
	f.untouched(t)
	named(t, out, fmt.Sprintf("kubelet pid %d", f.kubelet.Process.Pid), filepath.Dir(f.cgroup), f.mounts[0], f.mounts[1])
}

// up.sh refuses to start on a node whose kubelet runs, before touching anything.
func TestUpRefusesWhenAForeignKubeletRuns(t *testing.T) {
	h := newHarness(t)
	f := h.foreignNode(t)
	code, out := h.run(t, "up.sh")
	if code == 0 {
		t.Fatal("up.sh succeeded")
	}
	f.untouched(t)
	named(t, out, "kubelet this harness did not start", fmt.Sprintf("kubelet pid %d", f.kubelet.Process.Pid))
	if _, err := os.Stat(filepath.Join(h.state, "owned")); err == nil {
		t.Error("up.sh wrote an ownership stamp")
	}
}

// up.sh refuses to start on a node whose kubelet is stopped but whose pods'
// mounts are still under the kubelet root: its bind mount would hide them.
func TestUpRefusesForeignMountsUnderTheKubeletRoot(t *testing.T) {
	h := newHarness(t)
	if pids := kubelets(); len(pids) > 0 {
		t.Skipf("a kubelet runs on this machine (%v): up.sh refuses for that first", pids)
	}
	m := filepath.Join(h.kroot, "pods/2222/volumes/kubernetes.io~csi/pvc-b/mount")
	tmpfs(t, m)
	code, out := h.run(t, "up.sh")
	if code == 0 {
		t.Fatal("up.sh succeeded")
	}
	if !mounted(m) {
		t.Errorf("%s was unmounted", m)
	}
	if !strings.Contains(out, "holds mounts this harness did not make") || !strings.Contains(out, m) {
		t.Error("up.sh does not say which mounts made it refuse")
	}
}

// kubelets: pids of every process whose executable is called kubelet.
func kubelets() []string {
	var pids []string
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		if exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe")); err == nil &&
			strings.TrimSuffix(filepath.Base(exe), " (deleted)") == "kubelet" {
			pids = append(pids, d.Name())
		}
	}
	return pids
}

// What a killed run of ours left, beside a real node's things: down.sh removes
// exactly what the stamp names — our kubelet, the containers in our cgroup, our
// bind mount of the kubelet root and the pods' mounts in it, a directory and an
// iptables chain we made — and leaves the node's.
func TestDownRemovesWhatItsStampNames(t *testing.T) {
	h := newHarness(t)
	f := h.foreignNode(t)
	// Our kubelet root is elsewhere than the node's (the two cannot share one).
	h.kroot = filepath.Join(h.dir, "our-kubelet-root")
	h.env = append(h.env, "FILEVOL_E2E_KUBELET_ROOT="+h.kroot)

	var stamp, pids bytes.Buffer
	ours := h.fakeKubelet(t, "our-bin")
	fmt.Fprintf(&pids, "kubelet %d %s\n", ours.Process.Pid, startTime(t, ours.Process.Pid))

	cg := filepath.Join(hierarchy(t), fmt.Sprintf("fv-guard-ours-%d", ours.Process.Pid))
	mkCgroup(t, filepath.Join(cg, "kubepods", "pod1"))
	container := start(t, "sleep", "600")
	enter(t, filepath.Join(cg, "kubepods", "pod1"), container.Process.Pid)
	fmt.Fprintf(&stamp, "cgroup %s\n", cg)

	fmt.Fprintf(&stamp, "dir %s\n", h.kroot)
	if err := os.MkdirAll(filepath.Join(h.state, "kubelet"), 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(h.state, "kubelet"), &st); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&stamp, "mount %s %d:%d\n", h.kroot, st.Dev, st.Ino)
	if err := os.MkdirAll(h.kroot, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(t, "--bind", filepath.Join(h.state, "kubelet"), h.kroot)
	podMount := filepath.Join(h.kroot, "pods/3333/volumes/kubernetes.io~csi/pvc-c/mount")
	tmpfs(t, podMount)

	chain := fmt.Sprintf("FV-GUARD-%d", ours.Process.Pid)
	haveIPT := exec.Command("iptables", "-w", "-t", "filter", "-N", chain).Run() == nil
	if haveIPT {
		t.Cleanup(func() { exec.Command("iptables", "-w", "-t", "filter", "-X", chain).Run() })
		fmt.Fprintf(&stamp, "chain iptables filter %s\n", chain)
	}

	if err := os.WriteFile(filepath.Join(h.state, "pids"), pids.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.state, "owned"), stamp.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	code, _ := h.run(t, "down.sh")
	if code != 0 {
		t.Errorf("down.sh exited %d", code)
	}
	if alive(ours.Process.Pid) {
		t.Errorf("our kubelet (pid %d) still runs", ours.Process.Pid)
	}
	if alive(container.Process.Pid) {
		t.Errorf("the container in our cgroup (pid %d) still runs", container.Process.Pid)
	}
	if _, err := os.Stat(cg); err == nil {
		t.Errorf("our cgroup %s is still there", cg)
	}
	for _, m := range []string{podMount, h.kroot} {
		if mounted(m) {
			t.Errorf("%s is still mounted", m)
		}
	}
	if _, err := os.Stat(h.kroot); err == nil {
		t.Errorf("the kubelet root we made, %s, is still there", h.kroot)
	}
	if _, err := os.Stat(filepath.Join(h.state, "pids")); err == nil {
		t.Error("the stamp's pids is still there")
	}
	f.untouched(t)
	if !haveIPT {
		return
	}

	// The node's kubelet may use the KUBE-* chains too: ours stay, and in the
	// stamp, until a down.sh that runs when the node's kubelet is gone.
	if exec.Command("iptables", "-w", "-t", "filter", "-nL", chain).Run() != nil {
		t.Errorf("our chain %s was removed while the node's kubelet runs", chain)
	}
	f.kubelet.Process.Kill()
	f.kubelet.Wait()
	if pids := kubelets(); len(pids) > 0 {
		t.Skipf("a kubelet runs on this machine (%v): down.sh leaves the chains", pids)
	}
	if code, _ := h.run(t, "down.sh"); code != 0 {
		t.Errorf("down.sh exited %d", code)
	}
	if exec.Command("iptables", "-w", "-t", "filter", "-nL", chain).Run() == nil {
		t.Errorf("our chain %s is still there", chain)
	}
	if _, err := os.Stat(filepath.Join(h.state, "owned")); err == nil {
		t.Error("the stamp is still there")
	}
}

// Loop devices of other filevol tests (or a real node's filevol), on the same
// filesystem as our state dir and with filevol's image names, but under host
// paths outside the state dir: down.sh leaves them attached, even after a run
// of ours (a stamp that names our kubelet root), even once the image is
// deleted, and even once its whole directory is gone (another test's leak,
// its temporary directory removed: a host path, not a pod's view of a pool).
func TestDownLeavesOtherLoopDevicesAlone(t *testing.T) {
	h := newHarness(t)
	if pids := kubelets(); len(pids) > 0 {
		t.Skipf("a kubelet runs on this machine (%v): down.sh looks at no image it cannot place", pids)
	}
	vols := filepath.Join(h.dir, "other-test", "pool", "volumes")
	if err := os.MkdirAll(vols, 0o755); err != nil {
		t.Fatal(err)
	}
	var devs []string
	goneVols := filepath.Join(h.dir, "other-test-gone", "pool", "volumes")
	if err := os.MkdirAll(goneVols, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"fv-0123456789abcdef0123456789abcdef.img", "fv1-img-8f7231dd-0123456789abcdef0123456789abcdef.img",
		"fv1-img-8f7231dd-fedcba9876543210fedcba9876543210.img"} {
		dir := vols
		if i == 2 {
			dir = goneVols
		}
		img := filepath.Join(dir, name)
		if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("losetup", "-f", "--show", img).Output()
		if err != nil {
			t.Skipf("losetup: %v", err)
		}
		dev := strings.TrimSpace(string(out))
		t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
		devs = append(devs, dev)
		switch i {
		case 1:
			os.Remove(img) // "(deleted)", its directory still there
		case 2:
			os.RemoveAll(filepath.Dir(goneVols)) // "(deleted)", and no directory of its path left
		}
	}
	if err := os.MkdirAll(filepath.Join(h.state, "kubelet"), 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := fmt.Sprintf("dir %s\nmount %s 1:1\n", filepath.Join(h.dir, "gone"), h.kroot)
	if err := os.WriteFile(filepath.Join(h.state, "owned"), []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := h.run(t, "down.sh"); code != 0 {
		t.Errorf("down.sh exited %d", code)
	}
	for _, dev := range devs {
		if out, _ := exec.Command("losetup", "-nl", "-O", "BACK-FILE", dev).Output(); len(bytes.TrimSpace(out)) == 0 {
			t.Errorf("%s was detached", dev)
		}
	}
}
