package csi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/hostos/ofd"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

// fenceEnv is a controller of a shared pool that nodes n1 and n2 opened,
// with volume id made and its image locked for writing as n1's loop
// device would hold it (an OFD lock taken here: no device needed).
type fenceEnv struct {
	ctl   *ControllerService
	pool  *pool.Pool
	inuse *inuse.Store
}

func newFenceEnv(t *testing.T) *fenceEnv { return newFenceEnvWith(t, nil) }

// newFenceEnvWith is newFenceEnv whose controller's pool fences a node's
// client with fence (pool.Options.Fence).
func newFenceEnvWith(t *testing.T, fence func(context.Context, volume.FenceRequest) error) *fenceEnv {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pool")
	var p *pool.Pool
	for _, node := range []string{"n1", "n2", "controller"} {
		var err error
		if p, err = pool.Open(dir, pool.Options{NodeID: node, Shared: true, Fence: fence}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
	}
	return &fenceEnv{ctl: newControllerService(Config{NodeID: "controller", Shared: true}, p), pool: p, inuse: inuse.New(dir)}
}

// lockedVolume is a volume whose image is locked as a writer's device
// holds it, after it was attached to n1 and force-detached when detached.
func (e *fenceEnv) lockedVolume(t *testing.T, name string, detached bool) string {
	t.Helper()
	var id string
	if detached {
		id = e.attached(t, name, "n1")
		if _, err := e.ctl.ControllerUnpublishVolume(context.Background(), &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}); err != nil {
			t.Fatal(err)
		}
	} else {
		id = e.attached(t, name, "")
	}
	f, err := os.OpenFile(e.pool.ImagePath(id), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := (ofd.Kernel{}).TryLock(f, ofd.Write, ofd.Whole); err != nil {
		t.Fatal(err)
	}
	return id
}

// attached is a new volume, its image made, attached to node ("": to
// none).
func (e *fenceEnv) attached(t *testing.T, name, node string) string {
	t.Helper()
	v, err := e.pool.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.CommitImage(v); err != nil {
		t.Fatal(err)
	}
	if node == "" {
		return v.ID
	}
	if _, err := e.publish(v.ID, node); err != nil {
		t.Fatal(err)
	}
	return v.ID
}

func (e *fenceEnv) publish(id, node string) (*csipb.ControllerPublishVolumeResponse, error) {
	return e.ctl.ControllerPublishVolume(context.Background(), &csipb.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: node, VolumeCapability: capMount("ext4", rw)})
}

// TestFenceRefusalSaysWhatHoldsTheDevice: the refusal of n2's attach
// while n1's device holds the image says, beyond what it always said,
// what n1's in-use record tells of that device: nothing more without a
// record or with one of an older node; the device and how to find its
// holder there; the detach pending and by what, when n1 saw it.
func TestFenceRefusalSaysWhatHoldsTheDevice(t *testing.T) {
	e := newFenceEnv(t)
	id := e.lockedVolume(t, "a", true)
	always := "still holds the image of volume " + id + " open for writing through its loop device, so it could still write to it; " +
		"it lets go when filevol on that node unstages the volume, when the node's loop device is detached, or when the node's client is cut off from the pool's storage"
	refusal := func(what string) string {
		t.Helper()
		_, err := e.publish(id, "n2")
		wantCode(t, what, err, codes.FailedPrecondition)
		msg := err.Error()
		if !strings.Contains(msg, "node n1 (detached at ") || !strings.Contains(msg, always) {
			t.Fatalf("%s: %q does not say what the refusal always said", what, msg)
		}
		return msg
	}
	put := func(ent inuse.Entry) {
		t.Helper()
		if err := e.inuse.Put(ent); err != nil {
			t.Fatal(err)
		}
	}

	if msg := refusal("no in-use record"); !strings.HasSuffix(msg, always) {
		t.Errorf("without a record the refusal says more than before: %q", msg)
	}
	// An older node's record (no device), and the asking node's own: nothing to add.
	put(inuse.Entry{VolumeID: id, Node: "n1", StagingPath: "/s/n1"})
	put(inuse.Entry{VolumeID: id, Node: "n2", StagingPath: "/s/n2", Device: "/dev/loop9"})
	if msg := refusal("a record without a device"); !strings.HasSuffix(msg, always) {
		t.Errorf("with a record that names no device of n1's the refusal says more than before: %q", msg)
	}

	put(inuse.Entry{VolumeID: id, Node: "n1", StagingPath: "/s/n1", Device: "/dev/loop3"})
	msg := refusal("the device recorded")
	for _, want := range []string{"; node n1 staged it through its loop device /dev/loop3:", "losetup -l on node n1 shows it with AUTOCLEAR 1",
		"fuser -vm /dev/loop3", "lsof /dev/loop3", "findmnt -S /dev/loop3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal with n1's device recorded does not say %q: %q", want, msg)
		}
	}
	if strings.Contains(msg, "/dev/loop9") {
		t.Errorf("the refusal names the asking node's device: %q", msg)
	}

	seen := time.Date(2026, 11, 24, 10, 5, 0, 0, time.UTC)
	put(inuse.Entry{VolumeID: id, Node: "n1", StagingPath: "/s/n1", Device: "/dev/loop3",
		Pending: &inuse.PendingDetach{Device: "/dev/loop3", Holders: "mounted at /s/n1; open by pid 4242 (sleep)", Seen: seen}})
	msg = refusal("the detach pending recorded")
	for _, want := range []string{"; node n1's loop device /dev/loop3 is detached but its detach is pending, because the device is still held: mounted at /s/n1; open by pid 4242 (sleep) (seen by filevol on node n1 at 2026-11-24T10:05:00Z)",
		"only at its last close, so losetup -d again changes nothing", "end those holders on node n1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal with n1's pending detach recorded does not say %q: %q", want, msg)
		}
	}
	t.Logf("refusal: %s", msg)

	// Never attached through the controller (no detach to name): the
	// records of every node but the asking one say what they know.
	other := e.lockedVolume(t, "b", false)
	put(inuse.Entry{VolumeID: other, Node: "n1", StagingPath: "/s/n1", Device: "/dev/loop4"})
	_, err := e.publish(other, "n2")
	wantCode(t, "a volume never attached", err, codes.FailedPrecondition)
	if msg := err.Error(); !strings.Contains(msg, "another node still holds the image") || !strings.Contains(msg, "node n1 staged it through its loop device /dev/loop4") {
		t.Errorf("the refusal of a volume never attached: %q", msg)
	}
}
