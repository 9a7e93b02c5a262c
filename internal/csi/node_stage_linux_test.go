package csi

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/testutil"
)

// TestStageMarksTheImageOnTheKernel: on the real kernel, the device a
// stage attaches holds a lock on its image for as long as it exists (what
// lets a first stage skip the scan of every loop device), a re-stage finds
// and keeps it, and unstage lets the image go. A device whose detach the
// kernel deferred because something holds it open, with no record of the
// volume left on the node (the unstage that detached it dropped it), is
// still found by a first stage, through that lock: ABORTED, and no second
// device on the image.
func TestStageMarksTheImageOnTheKernel(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 not installed")
	}
	dir := testutil.Scratch(t, "csi-stage-mark") // its cleanup unmounts and detaches what is left under dir
	p, err := pool.Open(filepath.Join(dir, "pool"), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	d := New(Config{DriverName: "filevol.csi.io", NodeID: "n1", Node: true, KubeletDir: kubelet}, p, hostos.New(p.Dir()))
	e := &nodeEnv{t: t, pool: p, node: d.Node, kubelet: kubelet}
	locked := func(id string) bool {
		t.Helper()
		l, err := loop.Locked(p.ImagePath(id))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	find := func(id string) []loop.Device {
		t.Helper()
		devs, err := loop.Find(p.ImagePath(id))
		if err != nil {
			t.Fatal(err)
		}
		return devs
	}

	id := e.volume("a", "ext4", 32<<20)
	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	if !locked(id) {
		t.Fatal("the staged device holds no lock on its image")
	}
	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	if devs := find(id); len(devs) != 1 {
		t.Fatalf("devices after a re-stage: %+v, want the one", devs)
	}
	if err := e.unstage(id, e.staging("a")); err != nil {
		t.Fatal(err)
	}
	if locked(id) || len(find(id)) != 0 {
		t.Fatalf("after unstage: locked %v, devices %+v; want neither", locked(id), find(id))
	}

	// A detach deferred by an open of the device, the node's record gone.
	id = e.volume("b", "ext4", 32<<20)
	e.mustStage(id, e.staging("b"), capMount("ext4", rw))
	devs := find(id)
	if len(devs) != 1 {
		t.Fatalf("devices of the staged volume: %+v", devs)
	}
	held, err := os.Open(devs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := e.unstage(id, e.staging("b")); err != nil && !errors.Is(err, loop.ErrBusy) {
		t.Fatal(err)
	}
	if err := inuse.New(p.Dir()).Remove(id, "n1"); err != nil {
		t.Fatal(err)
	}
	if !locked(id) {
		t.Fatal("a device whose detach was deferred no longer holds its image's lock")
	}
	wantCode(t, "first stage while the earlier device detaches", e.stage(id, e.staging("b"), capMount("ext4", rw)), codes.Aborted)
	if devs := find(id); len(devs) != 1 {
		t.Fatalf("devices: %+v, want only the detaching one", devs)
	}
	held.Close()
	e.mustStage(id, e.staging("b"), capMount("ext4", rw))
	if devs := find(id); len(devs) != 1 {
		t.Fatalf("devices after the detach finished and a stage: %+v, want one", devs)
	}
}
