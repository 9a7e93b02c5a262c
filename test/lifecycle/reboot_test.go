// Package lifecycle tests whole volume lifecycles on the real kernel:
// restarts, reboots, and data surviving them.
package lifecycle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// volume is one volume under test and where it is staged and published.
type volume struct {
	name, id, staging, target string
	cap                       *csipb.VolumeCapability
	block                     bool
}

// TestRebootRestoresData stages, publishes and writes ext4, xfs, btrfs and
// block volumes, then leaves what a reboot leaves (no mounts, no loop
// devices, records on disk), restarts the driver, and shows that stage and
// publish — as kubelet calls them after a reboot — bring back the same data.
func TestRebootRestoresData(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "lifecycle-reboot")
	ctx := context.Background()
	d := driver.Start(t, dir)

	vols := []*volume{
		{name: "reboot-ext4", cap: driver.MountCap("ext4")},
		{name: "reboot-xfs", cap: driver.MountCap("xfs")},
		{name: "reboot-btrfs", cap: driver.MountCap("btrfs")},
		{name: "reboot-block", cap: driver.BlockCap(), block: true},
	}
	pattern := bytes.Repeat([]byte("filevol-reboot-"), 1<<16) // ~1 MiB
	want := sha256.Sum256(pattern)
	for _, v := range vols {
		resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name: v.name, VolumeCapabilities: []*csipb.VolumeCapability{v.cap},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 512 << 20},
		})
		if err != nil {
			t.Fatalf("create %s: %v", v.name, err)
		}
		v.id = resp.GetVolume().GetVolumeId()
		v.staging = filepath.Join(dir, "kubelet", v.name, "globalmount")
		v.target = filepath.Join(dir, "kubelet", "pods", v.name, "mount")
		if !imagePending(t, d, v.id) {
			t.Errorf("%s: a blank create did not mark its image pending", v.name)
		}
		stageAndPublish(t, d, v)
		// The first stage made the image durable before any write: a lost
		// image is from now on a lost volume, never remade blank.
		if imagePending(t, d, v.id) {
			t.Errorf("%s: image still pending after NodeStageVolume", v.name)
		}
		writeAt(t, v, pattern)
	}

	d.Stop(t)
	driver.SimulateReboot(t, dir)
	if n := len(driver.Loops(t, dir)); n != 0 {
		t.Fatalf("%d loop devices survived the simulated reboot", n)
	}
	d = driver.Start(t, dir)

	for _, v := range vols {
		stageAndPublish(t, d, v)
		if got := sha256.Sum256(readAt(t, v, len(pattern))); got != want {
			t.Errorf("%s: data after reboot differs from data written before", v.name)
		}
	}
	// A second stage+publish after restart (kubelet retries) must not stack mounts.
	for _, v := range vols {
		stageAndPublish(t, d, v)
		if n := countMounts(t, v.target); n != 1 {
			t.Errorf("%s: %d mounts at target after repeated publish, want 1", v.name, n)
		}
	}
	teardown(t, d, vols)
	if m := driver.Mounts(t, dir); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	if l := driver.Loops(t, dir); len(l) != 0 {
		t.Errorf("loop devices left: %v", l)
	}
}

func stageAndPublish(t *testing.T, d *driver.Driver, v *volume) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.cap,
	}); err != nil {
		t.Fatalf("stage %s: %v", v.name, err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.cap,
	}); err != nil {
		t.Fatalf("publish %s: %v", v.name, err)
	}
}

func teardown(t *testing.T, d *driver.Driver, vols []*volume) {
	t.Helper()
	ctx := context.Background()
	for _, v := range vols {
		if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
			t.Errorf("unpublish %s: %v", v.name, err)
		}
		if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); err != nil {
			t.Errorf("unstage %s: %v", v.name, err)
		}
		if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			t.Errorf("delete %s: %v", v.name, err)
		}
	}
}

// writeAt writes data to the volume: a file in a mount volume, the device
// itself (through the published device node) for a block volume. It syncs,
// as a database would before acknowledging.
func writeAt(t *testing.T, v *volume, data []byte) {
	t.Helper()
	path := v.target
	flags := os.O_WRONLY
	if !v.block {
		path, flags = filepath.Join(v.target, "data"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync %s: %v", path, err)
	}
}

func readAt(t *testing.T, v *volume, n int) []byte {
	t.Helper()
	path := v.target
	if !v.block {
		path = filepath.Join(v.target, "data")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return buf
}

func countMounts(t *testing.T, path string) int {
	n := 0
	for _, m := range driver.Mounts(t, path) {
		if m.MountPoint == path {
			n++
		}
	}
	return n
}

// imagePending reads the volume's record from the pool on disk.
func imagePending(t *testing.T, d *driver.Driver, id string) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.PoolDir, "volumes", id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		ImagePending bool `json:"imagePending"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.ImagePending
}
