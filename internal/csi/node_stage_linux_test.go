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
	e, _ := nodeEnvOn(t, dir, hostos.New)
	p := e.pool
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

	// A device number left with another scheduler by its last user (the
	// queue keeps it across detach and attach); the stage usually gets
	// that number back, the lowest free.
	other := filepath.Join(dir, "other.img")
	if err := os.WriteFile(other, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	od, err := loop.Attach(t.Context(), other, loop.Options{Scheduler: "mq-deadline"})
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Detach(od.Path); err != nil {
		t.Fatal(err)
	}
	id := e.volume("a", "ext4", 32<<20)
	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	if !locked(id) {
		t.Fatal("the staged device holds no lock on its image")
	}
	if devs := find(id); len(devs) != 1 {
		t.Fatalf("devices of the staged volume: %+v", devs)
	} else if s, err := loop.Scheduler(devs[0]); err != nil || s != "none" {
		t.Fatalf("scheduler of the staged device %s (the mq-deadline one was %s) = %q, %v; want none", devs[0].Path, od.Path, s, err)
	} else if devs[0].Number != od.Number {
		t.Logf("the stage got %s, not %s: the scheduler check proved nothing this time", devs[0].Path, od.Path)
		if _, err := os.Stat(filepath.Join("/sys/block", filepath.Base(od.Path), "loop", "backing_file")); os.IsNotExist(err) {
			_ = os.WriteFile(filepath.Join("/sys/block", filepath.Base(od.Path), "queue", "scheduler"), []byte("none"), 0)
		}
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
