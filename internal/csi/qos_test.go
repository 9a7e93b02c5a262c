package csi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/cgroup"
	"github.com/filevol/filevol/internal/volume"
)

// The pod of nodeEnv.target, in a fake cgroup v2 tree laid out by the
// systemd driver.
const testPodUID = "0b7e2c1a-5d4f-4c3b-9a8e-1f2d3c4b5a69"

// withQoS gives the node an enforcer over a fake cgroup v2 hierarchy in
// which the pod of nodeEnv.target exists; it returns the pod's io.max.
func (e *nodeEnv) withQoS() string {
	e.t.Helper()
	root := e.t.TempDir()
	pod := filepath.Join(root, "kubepods.slice/kubepods-burstable.slice",
		"kubepods-burstable-pod"+strings.ReplaceAll(testPodUID, "-", "_")+".slice")
	if err := os.MkdirAll(pod, 0o755); err != nil {
		e.t.Fatal(err)
	}
	for p, s := range map[string]string{filepath.Join(root, "cgroup.controllers"): "cpu io memory\n", filepath.Join(pod, "io.max"): ""} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	e.node.qos = &qosEnforcer{hier: cgroup.Detect([]string{root}), problems: map[string]string{},
		devNum: func(string) (string, error) { return "7:0", nil }}
	return filepath.Join(pod, "io.max")
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Publish applies the record's limits to the pod that the target names;
// a later change of the record reaches it through ReconcileQoS alone.
func TestQoSPublishAndReconcile(t *testing.T) {
	e := newNodeEnv(t)
	ioMax := e.withQoS()
	id := e.volume("q", "ext4", 64<<20)
	if _, err := e.pool.SetQoS(id, volume.QoS{WriteIOPS: 100}); err != nil {
		t.Fatal(err)
	}
	c := capMount("ext4", rw)
	e.mustStage(id, e.staging("q"), c)
	tables, finds := e.k.Calls("table"), e.k.Calls("find")
	e.mustPublish(id, e.staging("q"), e.target("q"), c, false)
	if got, want := readFile(t, ioMax), "7:0 riops=max wiops=100 rbps=max wbps=max"; got != want {
		t.Fatalf("io.max after publish = %q, want %q", got, want)
	}
	// The publish and its limits asked about the two paths and the one
	// device alone: nothing that grows with the node's volumes.
	if n, m := e.k.Calls("table")-tables, e.k.Calls("find")-finds; n != 0 || m != 0 {
		t.Errorf("publish read the mount table %d times and scanned the loop devices %d times, want 0", n, m)
	}
	if _, err := e.pool.SetQoS(id, volume.QoS{WriteBytesPerSecond: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	e.node.ReconcileQoS()
	if got, want := readFile(t, ioMax), "7:0 riops=max wiops=max rbps=max wbps=1048576"; got != want {
		t.Fatalf("io.max after reconcile = %q, want %q", got, want)
	}
	if h := e.health(id); len(h) != 0 {
		t.Fatalf("health with limits applied: %v", h)
	}
	// The publish ends: its rule goes (a plain file here, overwritten in
	// place, so only the start of it is the new rule).
	if err := e.unpublish(id, e.target("q")); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, ioMax), "7:0 riops=max wiops=max rbps=max wbps=max"; !strings.HasPrefix(got, want) {
		t.Fatalf("io.max after unpublish = %q, want %q", got, want)
	}
}

// A pod whose cgroup cannot be found does not fail the publish; the
// volume's health says its limits are not enforced.
func TestQoSPodNotFound(t *testing.T) {
	e := newNodeEnv(t)
	e.withQoS()
	id := e.volume("q", "ext4", 64<<20)
	if _, err := e.pool.SetQoS(id, volume.QoS{ReadIOPS: 5}); err != nil {
		t.Fatal(err)
	}
	c := capMount("ext4", rw)
	e.mustStage(id, e.staging("q"), c)
	other := strings.Replace(e.target("q"), testPodUID, "99999999-9999-4999-8999-999999999999", 1)
	e.mustPublish(id, e.staging("q"), other, c, false)
	h := e.health(id)
	if len(h) != 1 || h[0].GetReason() != volume.ReasonLimitsNotEnforced || !strings.Contains(h[0].GetMessage(), "pod cgroup not found") {
		t.Fatalf("health = %v, want one %s", h, volume.ReasonLimitsNotEnforced)
	}
}

func (e *nodeEnv) health(id string) []*csipb.VolumeHealth_VolumeHealthEntry {
	e.t.Helper()
	r, err := e.node.NodeGetVolumeHealth(context.Background(), &csipb.NodeGetVolumeHealthRequest{VolumeId: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetVolumeHealth().GetHealthStatuses()
}

// A reconcile pass reads the mount table once, whatever the number of
// volumes attached (it read it once per volume: 1,000 parses a second on
// a node with 1,000 volumes), and still brings each volume's change to
// its pod.
func TestQoSReconcileReadsTheKernelOncePerPass(t *testing.T) {
	e := newNodeEnv(t)
	ioMax := e.withQoS()
	c := capMount("ext4", rw)
	var ids []string
	for _, name := range []string{"q1", "q2", "q3", "q4"} {
		id := e.volume(name, "ext4", 64<<20)
		e.mustStage(id, e.staging(name), c)
		e.mustPublish(id, e.staging(name), e.target(name), c, false)
		ids = append(ids, id)
	}
	// The fake's devices all have the number 7:0 in the pod's one io.max:
	// every volume gets the same change, so whichever is applied last
	// shows it.
	for _, id := range ids {
		if _, err := e.pool.SetQoS(id, volume.QoS{ReadIOPS: 7}); err != nil {
			t.Fatal(err)
		}
	}
	before := e.k.Calls("table")
	e.node.ReconcileQoS()
	if n := e.k.Calls("table") - before; n != 1 {
		t.Errorf("one reconcile pass over %d volumes read the mount table %d times, want 1", len(ids), n)
	}
	if got, want := readFile(t, ioMax), "7:0 riops=7 wiops=max rbps=max wbps=max"; !strings.HasPrefix(got, want) {
		t.Errorf("io.max after reconcile = %q, want %q", got, want)
	}
}
