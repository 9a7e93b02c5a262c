package csi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/volview"
)

func TestNodePublishMount(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging, target := e.staging("a"), e.target("a")
	c := capMount("ext4", rw)
	wantCode(t, "publish before stage", e.publish(id, staging, target, c, false), codes.FailedPrecondition)
	e.mustStage(id, staging, c)
	e.mustPublish(id, staging, target, c, false)
	st, _ := e.top(staging)
	m, ok := e.top(target)
	if !ok || m.Major != st.Major || m.Minor != st.Minor || m.Root != "/" || slices.Contains(m.Options, "ro") {
		t.Fatalf("target mount %+v, want a read-write bind of the staging mount %+v", m, st)
	}
	for _, o := range []string{"nosuid", "nodev"} {
		if !slices.Contains(m.Options, o) {
			t.Errorf("target options %v lack %s (kept from the staging mount)", m.Options, o)
		}
	}
	binds := e.k.Calls("bind")
	e.mustPublish(id, staging, target, c, false)
	if e.k.Calls("bind") != binds {
		t.Errorf("a second identical publish bound again")
	}
	wantCode(t, "read-only publish over the read-write one", e.publish(id, staging, target, c, true), codes.AlreadyExists)

	roTarget := e.target("a-ro")
	e.mustPublish(id, staging, roTarget, c, true)
	if m, _ := e.top(roTarget); !slices.Contains(m.Options, "ro") {
		t.Errorf("read-only publish options %v", m.Options)
	}
}

func TestNodePublishTargetOccupied(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging, target := e.staging("a"), e.target("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := e.k.MountAt(target, "tmpfs", "tmpfs"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "publish over a tmpfs", e.publish(id, staging, target, capMount("ext4", rw), false), codes.AlreadyExists)
}

func TestNodePublishSingleWriter(t *testing.T) {
	for _, c := range []struct {
		name string
		cap  func(csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability
	}{
		{"mount", func(m csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability { return capMount("ext4", m) }},
		{"block", capBlock},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.volume("a", "ext4", 64<<20)
			staging := e.staging("a")
			e.mustStage(id, staging, c.cap(single))
			e.mustPublish(id, staging, e.target("one"), c.cap(single), false)
			e.mustPublish(id, staging, e.target("one"), c.cap(single), false) // the same target again: fine
			wantCode(t, "second target", e.publish(id, staging, e.target("two"), c.cap(single), false), codes.FailedPrecondition)
			// SINGLE_NODE_MULTI_WRITER allows any number.
			e.mustPublish(id, staging, e.target("three"), c.cap(multi), false)
		})
	}
}

func TestNodePublishBlock(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	target := filepath.Join(e.kubelet, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-a/0b7e2c1a-5d4f-4c3b-9a8e-1f2d3c4b5a69")
	wantCode(t, "publish before stage", e.publish(id, staging, target, capBlock(rw), false), codes.FailedPrecondition)
	e.mustStage(id, staging, capBlock(rw))
	// Some COs create the target as a directory: it becomes a file.
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	e.mustPublish(id, staging, target, capBlock(rw), false)
	dev := e.devices(id)[0]
	if m, ok := e.top(target); !ok || !volview.Binds(m, dev) {
		t.Fatalf("target %+v (%v), want a bind of %s", m, ok, dev.Path)
	}
	if st, err := os.Stat(target); err != nil || st.IsDir() {
		t.Errorf("target %v (%v), want a file", st, err)
	}

	// Read-only: a read-only device of its own, detached at unpublish.
	roTarget := target + "-ro"
	e.mustPublish(id, staging, roTarget, capBlock(rw), true)
	devs := e.devices(id)
	if len(devs) != 2 || !devs[1].ReadOnly {
		t.Fatalf("devices %+v, want the staged one and a read-only one", devs)
	}
	if m, _ := e.top(roTarget); !volview.Binds(m, devs[1]) {
		t.Errorf("read-only target %+v is not a bind of %s", m, devs[1].Path)
	}
	if err := e.unpublish(id, roTarget); err != nil {
		t.Fatal(err)
	}
	if devs := e.devices(id); len(devs) != 1 || devs[0].ReadOnly {
		t.Errorf("after the read-only unpublish: devices %+v, want only the staged one", devs)
	}
}

// A read-only block publish that attached a device and failed to bind it
// leaves no device behind.
func TestNodePublishBlockFailureDetaches(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capBlock(rw))
	boom := errors.New("injected")
	e.k.Fail("Bind", boom)
	if err := e.publish(id, staging, e.target("ro"), capBlock(rw), true); !errors.Is(err, boom) {
		t.Fatalf("publish: %v", err)
	}
	if devs := e.devices(id); len(devs) != 1 || devs[0].ReadOnly {
		t.Errorf("devices %+v, want only the staged one", devs)
	}
}

func TestNodeUnpublishIdempotent(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging, target := e.staging("a"), e.target("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	e.mustPublish(id, staging, target, capMount("ext4", rw), false)
	for i := range 2 {
		if err := e.unpublish(id, target); err != nil {
			t.Fatalf("unpublish %d: %v", i+1, err)
		}
	}
	if _, ok := e.top(target); ok {
		t.Error("target still mounted")
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target not removed: %v", err)
	}
	if _, ok := e.top(staging); !ok {
		t.Error("unpublish unmounted the staging path")
	}
	wantCode(t, "unpublish without ID", e.unpublish("", target), codes.InvalidArgument)
	wantCode(t, "unpublish without target", e.unpublish(id, ""), codes.InvalidArgument)
}

func TestNodeUnstage(t *testing.T) {
	for _, c := range []struct {
		name string
		cap  *csipb.VolumeCapability
	}{{"mount", capMount("ext4", rw)}, {"block", capBlock(rw)}} {
		t.Run(c.name, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.volume("a", "ext4", 64<<20)
			staging, target := e.staging("a"), e.target("a")
			e.mustStage(id, staging, c.cap)
			if rec := e.inUse(id); len(rec) != 1 || rec[0].StagingPath != staging || rec[0].Block != (c.name == "block") {
				t.Fatalf("in-use records %+v after stage", rec)
			}
			e.mustPublish(id, staging, target, c.cap, false)
			wantCode(t, "unstage while published", e.unstage(id, staging), codes.FailedPrecondition)
			if len(e.devices(id)) != 1 {
				t.Fatal("a refused unstage detached the device")
			}
			if err := e.unpublish(id, target); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := e.unstage(id, staging); err != nil {
					t.Fatalf("unstage %d: %v", i+1, err)
				}
			}
			if devs := e.devices(id); len(devs) != 0 {
				t.Errorf("devices %v left after unstage", devs)
			}
			if rec := e.inUse(id); len(rec) != 0 {
				t.Errorf("in-use records %+v left after unstage", rec)
			}
			table, _ := e.k.Table()
			if ms := table.Under(staging); len(ms) != 0 {
				t.Errorf("mounts left under the staging path: %+v", ms)
			}
			if _, err := os.Stat(volview.StagedDevicePath(staging)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("staged device file left: %v", err)
			}
		})
	}
}

// <staging>/device in a mount volume's filesystem is the user's file.
func TestNodeUnstageLeavesUsersDeviceFile(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	user := volview.StagedDevicePath(staging)
	if err := os.WriteFile(user, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.unstage(id, staging); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(user); err != nil {
		t.Errorf("the user's file named device: %v", err)
	}
}

// A device that will not detach (busy) fails the unstage, and a retry
// finishes it.
func TestNodeUnstageDetachFailure(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	e.k.FailOnce("DetachFile", errors.New("injected"))
	if err := e.unstage(id, staging); err == nil {
		t.Fatal("unstage succeeded although the device did not detach")
	}
	if err := e.unstage(id, staging); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if devs := e.devices(id); len(devs) != 0 {
		t.Errorf("devices %v", devs)
	}
}
