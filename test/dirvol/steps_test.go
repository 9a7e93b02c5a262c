package dirvol

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/test/driver"
)

// stageAndPublish stages the volume at staging and publishes it at
// target, as kubelet does for a pod.
func stageAndPublish(t *testing.T, d *driver.Driver, id, staging, target string, c *csipb.VolumeCapability) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: c}); err != nil {
		t.Fatal(err)
	}
}

// unpublishAndDelete undoes stageAndPublish, deletes the volume and
// empties the directory pool's trash: each step must succeed.
func unpublishAndDelete(t *testing.T, d *driver.Driver, id, staging, target string) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	if err := d.DirPool.EmptyTrash(); err != nil {
		t.Fatalf("the trash keeps volume %s: %v", id, err)
	}
}
