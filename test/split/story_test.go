package split

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/proc"
)

// The controller process knows a volume is in use, refuses to delete it
// and has its filesystem frozen for a snapshot, all through the pool: the
// node process records the stage and answers the freeze.
func TestControllerDecidesFromThePool(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "split-story")
	bin := proc.BuildDriver(t)
	ctrlProc := startProc(t, bin, dir, "controller")
	nodeProc := startProc(t, bin, dir, "node")
	ctrl, node := csipb.NewControllerClient(ctrlProc.Conn), csipb.NewNodeClient(nodeProc.Conn)
	ctx := context.Background()

	mountCap := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
	}
	vol, err := ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "story", VolumeCapabilities: []*csipb.VolumeCapability{mountCap},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if _, err := node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("written before the snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}

	got, err := ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
	if err != nil || !slices.Equal(got.GetStatus().GetPublishedNodeIds(), []string{nodeID}) {
		t.Errorf("ControllerGetVolume: published on %v (%v), want [%s]", got.GetStatus().GetPublishedNodeIds(), err, nodeID)
	}
	_, err = ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "staged on node "+nodeID+" at "+staging) {
		t.Errorf("DeleteVolume of a staged volume = %v, want FAILED_PRECONDITION naming node %s and %s", err, nodeID, staging)
	}

	snap, err := ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "story-snap", SourceVolumeId: id})
	if err != nil {
		t.Fatalf("CreateSnapshot of a mounted volume: %v", err)
	}
	if !nodeProc.LogHas("filesystem frozen", id) || !nodeProc.LogHas("filesystem thawed", id) {
		t.Errorf("the node process did not log freezing and thawing volume %s for the snapshot:\n%s", id, nodeProc.LogText())
	}
	// The pod can still write: the filesystem was thawed.
	if err := os.WriteFile(filepath.Join(target, "after"), []byte("x"), 0o600); err != nil {
		t.Errorf("write after the snapshot: %v", err)
	}

	if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if got, err := ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id}); err != nil || len(got.GetStatus().GetPublishedNodeIds()) != 0 {
		t.Errorf("after unstage: published on %v (%v), want none", got.GetStatus().GetPublishedNodeIds(), err)
	}
	if _, err := ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume after unstage: %v", err)
	}
	ctrlProc.Stop(t)
	nodeProc.Stop(t)
	checkNoLeaks(t, dir)
}
