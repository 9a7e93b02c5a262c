package dirvol

import (
	"context"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// A staged directory volume that no pod has published yet keeps its
// in-use record through the node's reconcile (which runs at start and at
// every garbage collection), so DeleteVolume keeps refusing it; once it
// is unstaged, the reconcile has nothing to keep and the delete goes on.
// Before the stage bound the directory at the staging path, the kernel
// showed nothing of such a volume and the reconcile dropped its record.
func TestStagedUnpublishedVolumeKeepsItsInUseRecord(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "dirvol-inuse")
	btrfs := dirpooltest.Btrfs(t, testutil.Scratch(t, "dirvol-inuse-btrfs"), 1<<30)
	d := driver.StartWithDirPool(t, dir, btrfs)
	ctx := context.Background()
	rw := dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-staged",
		Parameters:         map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory},
		VolumeCapabilities: []*csipb.VolumeCapability{rw}, CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 * mib}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	staging := filepath.Join(dir, "staging")
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	// Retried: success, one mount.
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	records := func() []inuse.Entry {
		es, err := inuse.New(btrfs).Of(id)
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	d.Services.Node.ReconcileInUse()
	if es := records(); len(es) != 1 || es[0].StagingPath != staging {
		t.Fatalf("after the reconcile, the in-use records of the staged volume are %+v", es)
	}
	_, err = d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume of a staged, unpublished volume after a reconcile", err, codes.FailedPrecondition)
	if m := mountAt(t, staging); len(m) != 1 {
		t.Errorf("staging path mounts: %+v", m)
	}

	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if m := mountAt(t, staging); len(m) != 0 {
		t.Fatalf("unstage left mounts: %+v", m)
	}
	d.Services.Node.ReconcileInUse()
	if es := records(); len(es) != 0 {
		t.Fatalf("after unstage and reconcile: records %+v", es)
	}
	if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// Unstaging while a pod still has the volume published is refused, and
// the record stays.
func TestUnstageRefusedWhilePublished(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "dirvol-unstage")
	btrfs := dirpooltest.Btrfs(t, testutil.Scratch(t, "dirvol-unstage-btrfs"), 1<<30)
	d := driver.StartWithDirPool(t, dir, btrfs)
	ctx := context.Background()
	rw := dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
	resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-pub",
		Parameters:         map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory},
		VolumeCapabilities: []*csipb.VolumeCapability{rw}, CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 * mib}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	// SINGLE_NODE_SINGLE_WRITER: the staging bind is not another writer.
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	_, err = d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	wantCode(t, "NodeUnstageVolume while published", err, codes.FailedPrecondition)
	if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}
