package csi

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/pool"
)

// A 1 MiB claim on xfs gets a 300 MiB volume (the filesystem's minimum).
// Its snapshot must report the claim's size as its restore size, not the
// image's: external-provisioner refuses to restore a snapshot into a claim
// smaller than the snapshot's size, so a claim with its source's request
// would stay Pending for ever. The restored volume still holds the image.
func TestSmallClaimRestoresFromItsOwnSnapshot(t *testing.T) {
	dir := t.TempDir()
	p, err := pool.Open(dir, pool.Options{NodeID: "node"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := newControllerService(Config{NodeID: "node"}, p)
	ctx := context.Background()
	xfs := []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "xfs"}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	small := &csipb.CapacityRange{RequiredBytes: 1 << 20}
	vol, err := s.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "small", VolumeCapabilities: xfs, CapacityRange: small})
	if err != nil {
		t.Fatal(err)
	}
	image := vol.GetVolume().GetCapacityBytes()
	if image < 300<<20 {
		t.Fatalf("xfs volume of %d bytes: below xfs's minimum, the test would not test the trap", image)
	}
	snap, err := s.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol.GetVolume().GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.GetSnapshot().GetSizeBytes(); got != 1<<20 {
		t.Errorf("snapshot size_bytes = %d, want the claim's 1 MiB request (the image is %d bytes)", got, image)
	}
	restored, err := s.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "restored", VolumeCapabilities: xfs, CapacityRange: small,
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}},
	})
	if err != nil {
		t.Fatalf("restore into a claim of the source's request: %v", err)
	}
	if got := restored.GetVolume().GetCapacityBytes(); got < image {
		t.Errorf("restored volume has %d bytes, less than the snapshot's image (%d)", got, image)
	}
	// A snapshot of the restore reports the restore's request, and so on.
	again, err := s.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap2", SourceVolumeId: restored.GetVolume().GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := again.GetSnapshot().GetSizeBytes(); got != 1<<20 {
		t.Errorf("snapshot of the restore: size_bytes = %d, want 1 MiB", got)
	}
}
