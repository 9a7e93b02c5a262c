package dirvol

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// A directory pool on ext4 (no quota filevol can enforce on this
// kernel), through the real services: CreateVolume is
// FAILED_PRECONDITION naming allowUnenforcedSize unless the class sets
// it; then the volume context and the node's and the controller's volume
// health (DEGRADED, SizeNotEnforced) say that the size is not enforced,
// NodeGetVolumeStats reports the filesystem's usage, and a pod can
// indeed write past the size. CreateSnapshot is FAILED_PRECONDITION.
func TestUnenforcedSizeSaidEverywhere(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "dirvol-plain")
	ext4 := dirpooltest.Filesystem(t, testutil.Scratch(t, "dirvol-plain-ext4"), 512<<20, "ext4")
	d := driver.StartWithDirPool(t, dir, ext4)
	ctx := context.Background()
	rw := dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	req := func(name string, params map[string]string) *csipb.CreateVolumeRequest {
		return &csipb.CreateVolumeRequest{Name: name, Parameters: params, VolumeCapabilities: []*csipb.VolumeCapability{rw},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 * mib}}
	}
	base := map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory}
	_, err := d.Controller.CreateVolume(ctx, req("refused", base))
	wantCode(t, "CreateVolume on ext4 without allowUnenforcedSize", err, codes.FailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), dirpool.ParamAllowUnenforcedSize) || !strings.Contains(err.Error(), "ext4") {
		t.Fatalf("the refusal does not say why or name the parameter: %v", err)
	}
	resp, err := d.Controller.CreateVolume(ctx, req("unenforced", with(base, dirpool.ParamAllowUnenforcedSize, "true")))
	if err != nil {
		t.Fatal(err)
	}
	vc := resp.GetVolume().GetVolumeContext()
	if vc[dirpool.ContextSizeEnforced] != "false" || !strings.Contains(vc[dirpool.ContextSizeNote], "NOT enforced") {
		t.Errorf("volume context %v does not say the size is unenforced", vc)
	}
	id := resp.GetVolume().GetVolumeId()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	stageAndPublish(t, d, id, staging, target, rw)
	if n, err := fill(filepath.Join(target, "past"), 16*mib); err != nil {
		t.Errorf("wrote %d of 16 MiB into an 8 MiB unenforced claim: %v", n, err)
	}
	stats, err := d.Node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if u := stats.GetUsage()[0]; u.GetTotal() < 256<<20 {
		t.Errorf("usage %v, want the pool filesystem's", u)
	}
	nh, err := d.Node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: target})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := d.Controller.ControllerGetVolumeHealth(ctx, &csipb.ControllerGetVolumeHealthRequest{VolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	for what, hs := range map[string][]*csipb.VolumeHealth_VolumeHealthEntry{"node": nh.GetVolumeHealth().GetHealthStatuses(), "controller": ch.GetVolumeHealth().GetHealthStatuses()} {
		if len(hs) != 1 || hs[0].GetStatus() != csipb.VolumeHealthErrorType_DEGRADED || hs[0].GetReason() != "SizeNotEnforced" || !strings.Contains(hs[0].GetMessage(), "NOT enforced") {
			t.Errorf("%s volume health %v does not say the size is unenforced", what, hs)
		}
	}
	_, err = d.Controller.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: id})
	wantCode(t, "CreateSnapshot of a directory volume on ext4", err, codes.FailedPrecondition)
	unpublishAndDelete(t, d, id, staging, target)
	if ents, _ := os.ReadDir(filepath.Join(ext4, ".filevol", "trash")); len(ents) != 0 {
		t.Errorf("left in the trash: %v", ents)
	}
}
