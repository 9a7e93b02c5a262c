package csi

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/pool/imagenode"
)

// sharedNodeEnvOn is node n1 of a shared pool under dir, on the host that
// host makes for the pool's directory (a fake kernel, or the real one:
// hostos.New); start starts its driver again on the same pool and kernel
// (a restarted node plugin: its start's reconcile runs).
func sharedNodeEnvOn(t *testing.T, dir string, host func(poolDir string) Host) (e *nodeEnv, start func()) {
	t.Helper()
	p, err := pool.Open(filepath.Join(dir, "pool"), pool.Options{NodeID: "n1", Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	e = &nodeEnv{t: t, pool: p, kubelet: kubelet}
	start = func() {
		h := host(p.Dir())
		d := New(Config{DriverName: "filevol.csi.io", NodeID: "n1", Node: true, Shared: true, KubeletDir: kubelet}, p, h, imagenode.New(p, h, "n1", true))
		e.node = d.Node
	}
	start()
	return e, start
}

// stageAttached stages id on n1 with the publish_context of an
// attachment to n1, as the controller would have made it.
func (e *nodeEnv) stageAttached(id, staging string, c *csipb.VolumeCapability) {
	e.t.Helper()
	if err := e.tryStageAttached(id, staging, c); err != nil {
		e.t.Fatalf("NodeStageVolume(%s): %v", id, err)
	}
}

func (e *nodeEnv) tryStageAttached(id, staging string, c *csipb.VolumeCapability) error {
	e.t.Helper()
	a, err := attach.New(e.pool.Dir()).Attach(attach.Request{VolumeID: id, Node: "n1", SingleNode: true}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = e.node.NodeStageVolume(context.Background(), &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c,
		PublishContext: map[string]string{publishNodeKey: "n1", publishEpochKey: strconv.FormatUint(a.Epoch, 10)}})
	return err
}

// record is n1's in-use record of id.
func (e *nodeEnv) record(id string) (inuse.Entry, bool) {
	e.t.Helper()
	rec, ok, err := inuse.New(e.pool.Dir()).Get(id, "n1")
	if err != nil {
		e.t.Fatal(err)
	}
	return rec, ok
}

// TestNodeRecordsItsDeviceAndAPendingDetach: on a shared pool the node
// records the loop device it stages a volume through; an operator's
// losetup -d of that device while its staging mount and a process hold it
// only marks it, and the node's next look (a sweep, or its start) records
// the detach pending and what holds the device; once the holders let go
// the device goes, and the sweep drops the record. A stage retried while
// the detach is pending is refused and leaves the record as it was. A record without a
// device (an older node's) gets it at the sweep, not at start. On a node-local pool
// nothing of this is recorded.
func TestNodeRecordsItsDeviceAndAPendingDetach(t *testing.T) {
	ctx := context.Background()
	k := fake.New()
	e, start := sharedNodeEnvOn(t, t.TempDir(), func(string) Host { return k.Host() })
	e.k = k
	id := e.committed("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.stageAttached(id, staging, capMount("ext4", rw))
	devs := e.devices(id)
	if len(devs) != 1 {
		t.Fatalf("devices of the staged volume: %v", devs)
	}
	dev := devs[0].Path
	rec, _ := e.record(id)
	if rec.Device != dev || rec.Pending != nil {
		t.Fatalf("record after stage: %+v, want device %s and nothing pending", rec, dev)
	}
	staged := rec.Since

	// Nothing pending: a sweep leaves the record as it is.
	if _, err := e.node.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, _ = e.record(id); rec.Pending != nil || !rec.Since.Equal(staged) {
		t.Fatalf("record after a sweep with nothing pending: %+v", rec)
	}

	e.k.HoldOpen(dev)
	e.k.LosetupDetach(dev)
	if devs := e.devices(id); len(devs) != 1 || !devs[0].Detaching {
		t.Fatalf("after losetup -d: %v, want the device there, detaching", devs)
	}
	if _, err := e.node.GC(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _ = e.record(id)
	if p := rec.Pending; p == nil || p.Device != dev || p.Seen.IsZero() ||
		!strings.Contains(p.Holders, "mounted at "+staging) || !strings.Contains(p.Holders, "open by 1 process(es)") {
		t.Fatalf("record after the sweep: %+v (pending %+v), want the detach of %s pending, held by its mount and a process", rec, rec.Pending, dev)
	}
	if rec.Device != dev || rec.StagingPath != staging || !rec.Since.Equal(staged) {
		t.Errorf("the sweep changed the rest of the record: %+v", rec)
	}

	// A restarted node plugin sees it at start, before the first sweep.
	rec.Pending = nil
	if err := inuse.New(e.pool.Dir()).Put(rec); err != nil {
		t.Fatal(err)
	}
	start()
	if rec, _ = e.record(id); rec.Pending == nil || rec.Pending.Device != dev {
		t.Fatalf("record after a restart: %+v, want the pending detach noted at start", rec)
	}
	// A stage retried meanwhile is refused, and keeps what the record says.
	wantCode(t, "stage while the device's detach is pending", e.tryStageAttached(id, staging, capMount("ext4", rw)), codes.Aborted)
	if again, _ := e.record(id); again.Device != dev || again.Pending == nil || !again.Pending.Seen.Equal(rec.Pending.Seen) {
		t.Fatalf("record after a refused stage: %+v, want it as before (%+v)", again, rec)
	}

	// An older node's record, without its device, of a volume staged here.
	other := e.committed("b", "ext4", 64<<20)
	e.stageAttached(other, e.staging("b"), capMount("ext4", rw))
	old, _ := e.record(other)
	old.Device = ""
	if err := inuse.New(e.pool.Dir()).Put(old); err != nil {
		t.Fatal(err)
	}
	// Not at start: writing every record before serving would delay it.
	start()
	if rec, _ := e.record(other); rec.Device != "" {
		t.Errorf("the start added the device to an older record: %+v, want it left to the sweep", rec)
	}

	// The holders let go: the kernel frees the device.
	e.k.Release(dev)
	if err := e.k.UnmountAll(staging); err != nil {
		t.Fatal(err)
	}
	if devs := e.devices(id); len(devs) != 0 {
		t.Fatalf("devices left once nothing holds them: %v", devs)
	}
	if _, err := e.node.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, ok := e.record(id); ok {
		t.Errorf("record of a volume whose device is gone kept: %+v", rec)
	}
	if rec, _ := e.record(other); rec.Device != e.devices(other)[0].Path || rec.Pending != nil {
		t.Errorf("an older record after the sweep: %+v, want its device %s", rec, e.devices(other)[0].Path)
	}

	// A node-local pool records none of it.
	local := newNodeEnv(t)
	lid := local.committed("c", "ext4", 64<<20)
	local.mustStage(lid, local.staging("c"), capMount("ext4", rw))
	if recs := local.inUse(lid); len(recs) != 1 || recs[0].Device != "" {
		t.Errorf("record on a node-local pool: %+v, want no device", recs)
	}
}
