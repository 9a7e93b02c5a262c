package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// TestUnstageLeavesUsersDeviceFile: a block volume is staged as a bind at
// <staging>/device, and unstage removes that file. A mount volume's
// staging path is its filesystem's root, where "device" is the user's
// file: unstage must neither delete it nor fail on it when the filesystem
// is mounted read-only.
func TestUnstageLeavesUsersDeviceFile(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "lifecycle-unstage")
	ctx := context.Background()
	d := driver.Start(t, dir)

	rw := &volume{name: "unstage-rw", cap: driver.MountCap("ext4")}
	resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: rw.name, VolumeCapabilities: []*csipb.VolumeCapability{rw.cap},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	rw.id = resp.GetVolume().GetVolumeId()
	rw.staging = filepath.Join(dir, "kubelet", rw.name, "globalmount")
	rw.target = filepath.Join(dir, "kubelet", "pods", rw.name, "mount")
	stageAndPublish(t, d, rw)
	if err := os.WriteFile(filepath.Join(rw.target, "device"), []byte("the user's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: rw.id, TargetPath: rw.target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: rw.id, StagingTargetPath: rw.staging}); err != nil {
		t.Fatal(err)
	}

	// Read-only: the same filesystem staged and published read-only.
	ro := *rw
	ro.cap = driver.MountCap("ext4")
	ro.cap.AccessMode = &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY}
	stageAndPublish(t, d, &ro)
	if data, err := os.ReadFile(filepath.Join(ro.target, "device")); err != nil || string(data) != "the user's" {
		t.Errorf("the user's file \"device\" after unstage and stage: %q, %v", data, err)
	}
	teardown(t, d, []*volume{&ro}) // unpublish, unstage (read-only), delete
	if m := driver.Mounts(t, dir); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	if l := driver.Loops(t, dir); len(l) != 0 {
		t.Errorf("loop devices left: %v", l)
	}
}
