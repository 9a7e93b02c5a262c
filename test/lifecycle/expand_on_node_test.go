package lifecycle

import (
	"context"
	"os"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// TestNodeExpandGrowsImage is the second half of a deferred expansion:
// the controller (without this node's pool) promised 1 GiB, kubelet calls
// NodeExpandVolume on the volume's node, which grows the image, the loop
// device and the mounted filesystem while the volume is published.
func TestNodeExpandGrowsImage(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "lifecycle-expand-node")
	ctx := context.Background()
	d := driver.Start(t, dir)
	v := &volume{name: "grow-on-node", cap: driver.MountCap("xfs"),
		staging: dir + "/kubelet/grow/staging", target: dir + "/kubelet/grow/target"}
	resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: v.name, VolumeCapabilities: []*csipb.VolumeCapability{v.cap},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 512 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	v.id = resp.GetVolume().GetVolumeId()
	stageAndPublish(t, d, v)
	writeAt(t, v, []byte("before"))

	const want = 1 << 30
	if _, err := d.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: v.id, VolumePath: v.target, StagingTargetPath: v.staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: want}, VolumeCapability: v.cap,
	}); err != nil {
		t.Fatalf("NodeExpandVolume: %v", err)
	}
	if st, err := os.Stat(d.Pool.ImagePath(v.id)); err != nil || st.Size() != want {
		t.Fatalf("image size %v (%v), want %d", st.Size(), err, want)
	}
	if rec, err := d.Pool.Get(v.id); err != nil || rec.CapacityBytes != want {
		t.Fatalf("record capacity %d (%v), want %d", rec.CapacityBytes, err, want)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(v.target, &sfs); err != nil {
		t.Fatal(err)
	}
	if got := int64(sfs.Blocks) * sfs.Bsize; got < want*9/10 {
		t.Fatalf("filesystem is %d bytes after expansion, want about %d", got, want)
	}
	if string(readAt(t, v, len("before"))) != "before" {
		t.Fatal("data changed by the expansion")
	}
	teardown(t, d, []*volume{v})
}
