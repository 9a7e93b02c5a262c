package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func touch(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// kubelet's names for a pod's cgroup, by driver and QoS class, and a node
// in a container (kind) whose kubelet has a --cgroup-root of its own.
func TestFindPod(t *testing.T) {
	u := strings.ReplaceAll(uid, "-", "_")
	for _, tc := range []struct{ name, dir string }{
		{"cgroupfs guaranteed", "kubepods/pod" + uid},
		{"cgroupfs burstable", "kubepods/burstable/pod" + uid},
		{"cgroupfs besteffort", "kubepods/besteffort/pod" + uid},
		{"systemd guaranteed", "kubepods.slice/kubepods-pod" + u + ".slice"},
		{"systemd burstable", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice"},
		{"kind systemd", "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + u + ".slice"},
		{"cgroupfs in docker", "docker/0123abcd/kubepods/burstable/pod" + uid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			// Another pod, and a container of ours below our pod.
			mkdirs(t, root, "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/ctr", tc.dir+"/ctr1", "system.slice/sshd.service")
			got, err := Hierarchy{Root: root}.FindPod(uid)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tc.dir); got != want {
				t.Fatalf("FindPod = %s, want %s", got, want)
			}
		})
	}
}

func TestFindPodMissing(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "kubepods/burstable/pod11111111-2222-3333-4444-555555555555", "a/b/c/d/e/f/g/pod"+uid)
	for _, id := range []string{uid, "", "../x"} {
		if _, err := (Hierarchy{Root: root}).FindPod(id); !errors.Is(err, ErrPodNotFound) {
			t.Errorf("FindPod(%q): %v, want ErrPodNotFound (too deep, another pod's, or invalid)", id, err)
		}
	}
}

func TestDetect(t *testing.T) {
	v1, v2, v2NoIO, none := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	touch(t, filepath.Join(v1, "blkio.throttle.read_bps_device"), "")
	touch(t, filepath.Join(v2, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	touch(t, filepath.Join(v2NoIO, "cgroup.controllers"), "cpu memory\n")
	got := Detect([]string{v1, v2, v2NoIO, none, "/nonexistent"})
	want := []Hierarchy{{Root: v1}, {Root: v2, V2: true}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Detect = %+v, want %+v", got, want)
	}
}

// The files here are plain files, not the kernel's: a write replaces
// what a test put there rather than adding a rule, so each case starts
// from the file's content and checks one write.
func TestApplyV1(t *testing.T) {
	dir := t.TempDir()
	for _, f := range v1Files {
		touch(t, filepath.Join(dir, f), "")
	}
	h := Hierarchy{Root: dir}
	changed, err := h.Apply(dir, "7:3", Limits{WriteBPS: 2 << 20})
	if err != nil || !changed {
		t.Fatalf("Apply: changed %v, %v", changed, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "blkio.throttle.write_bps_device"))
	if string(b) != "7:3 2097152" {
		t.Fatalf("write_bps_device = %q", b)
	}
	// The kernel lists other devices' rules too; only ours is read.
	touch(t, filepath.Join(dir, "blkio.throttle.write_bps_device"), "8:0 1\n7:3 2097152\n")
	if l, err := h.Current(dir, "7:3"); err != nil || l != (Limits{WriteBPS: 2 << 20}) {
		t.Fatalf("Current = %+v, %v", l, err)
	}
	if changed, err := h.Apply(dir, "7:3", Limits{WriteBPS: 2 << 20}); err != nil || changed {
		t.Fatalf("same limits again: changed %v, %v; want nothing written", changed, err)
	}
}

// A v1 limit on a pod's cgroup reaches its containers' cgroups too: v1
// blkio throttling is not hierarchical.
func TestApplyV1Descendants(t *testing.T) {
	pod := t.TempDir()
	mkdirs(t, pod, "0123abcd", "4567ef01")
	for _, d := range []string{"", "0123abcd", "4567ef01"} {
		for _, f := range v1Files {
			touch(t, filepath.Join(pod, d, f), "")
		}
	}
	h := Hierarchy{Root: pod}
	if changed, err := h.Apply(pod, "7:3", Limits{WriteIOPS: 50}); err != nil || !changed {
		t.Fatalf("Apply: changed %v, %v", changed, err)
	}
	for _, d := range []string{"", "0123abcd", "4567ef01"} {
		if l, err := h.Current(filepath.Join(pod, d), "7:3"); err != nil || l != (Limits{WriteIOPS: 50}) {
			t.Errorf("cgroup %q: %+v, %v; want the pod's limit", d, l, err)
		}
	}
	// A container that starts later gets it from the next pass; the others
	// are not written again.
	mkdirs(t, pod, "89ab2345")
	for _, f := range v1Files {
		touch(t, filepath.Join(pod, "89ab2345", f), "")
	}
	if changed, err := h.Apply(pod, "7:3", Limits{WriteIOPS: 50}); err != nil || !changed {
		t.Fatalf("next pass: changed %v, %v; want the new container written", changed, err)
	}
	if l, _ := h.Current(filepath.Join(pod, "89ab2345"), "7:3"); l != (Limits{WriteIOPS: 50}) {
		t.Errorf("new container: %+v", l)
	}
	if changed, err := h.Apply(pod, "7:3", Limits{}); err != nil || !changed {
		t.Fatalf("removing: changed %v, %v", changed, err)
	}
	if l, _ := h.Current(filepath.Join(pod, "0123abcd"), "7:3"); l != (Limits{}) {
		t.Errorf("removed limit still in a container: %+v", l)
	}
}

func TestApplyV2(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "io.max")
	touch(t, p, "")
	h := Hierarchy{Root: dir, V2: true}
	if changed, err := h.Apply(dir, "7:3", Limits{}); err != nil || changed {
		t.Fatalf("no limits on a device without a rule: changed %v, %v", changed, err)
	}
	if changed, err := h.Apply(dir, "7:3", Limits{ReadIOPS: 100, WriteBPS: 1 << 20}); err != nil || !changed {
		t.Fatalf("Apply: changed %v, %v", changed, err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "7:3 riops=100 wiops=max rbps=max wbps=1048576" {
		t.Fatalf("io.max = %q", b)
	}
	// As the kernel shows it: its own key order, other devices listed.
	touch(t, p, "8:0 rbps=1 wbps=max riops=max wiops=max\n7:3 rbps=max wbps=1048576 riops=100 wiops=max\n")
	if changed, err := h.Apply(dir, "7:3", Limits{ReadIOPS: 100, WriteBPS: 1 << 20}); err != nil || changed {
		t.Fatalf("same limits again: changed %v, %v; want nothing written", changed, err)
	}
	if changed, err := h.Apply(dir, "7:3", Limits{}); err != nil || !changed {
		t.Fatalf("removing the limits: changed %v, %v", changed, err)
	}
	b, _ = os.ReadFile(p)
	if !strings.HasPrefix(string(b), "7:3 riops=max wiops=max rbps=max wbps=max") {
		t.Fatalf("io.max after removal = %q", b)
	}
}
