package dirvol

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// A pod makes a subvolume outside its volume's quota through its
// published directory, as a container may: the driver's guard puts it
// back, both health views say so (QuotaEscapeRepaired, naming it), the
// pod's writes stop at the size, and the volume deletes cleanly.
func TestPodsQuotaEscapeIsRepairedAndReported(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "dirvol-guard")
	btrfs := dirpooltest.Btrfs(t, testutil.Scratch(t, "dirvol-guard-btrfs"), 1<<30)
	d := driver.StartWithDirPool(t, dir, btrfs)
	ctx := context.Background()
	rw := dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)
	resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-esc",
		Parameters:         map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory},
		VolumeCapabilities: []*csipb.VolumeCapability{rw}, CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 * mib}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "pods", "p1", "vol")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
	stageAndPublish(t, d, id, staging, target, rw)
	fd, err := unix.Open(target, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var escErr error
	dirpooltest.AsPod(t, dirpooltest.ContainerCaps, func() { escErr = dirpooltest.EscapeSubvolume(fd, "esc", nil, -1) })
	_ = unix.Close(fd)
	if escErr != nil {
		t.Fatal(escErr)
	}
	if _, err := fill(filepath.Join(target, "esc", "f"), 8*mib); err != nil {
		t.Fatal(err)
	}
	want := func(h []*csipb.VolumeHealth_VolumeHealthEntry) bool {
		for _, e := range h {
			if e.GetReason() == "QuotaEscapeRepaired" && e.GetStatus() == csipb.VolumeHealthErrorType_DEGRADED && strings.Contains(e.GetMessage(), "esc") {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := d.Controller.ControllerGetVolumeHealth(ctx, &csipb.ControllerGetVolumeHealthRequest{VolumeId: id})
		if err != nil {
			t.Fatal(err)
		}
		if want(c.GetVolumeHealth().GetHealthStatuses()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no QuotaEscapeRepaired in the controller's health after 30 s: %v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n, err := d.Node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: target, StagingTargetPath: staging})
	if err != nil || !want(n.GetVolumeHealth().GetHealthStatuses()) {
		t.Errorf("the node's health %v (%v), want QuotaEscapeRepaired naming esc", n, err)
	}
	if w, err := fill(filepath.Join(target, "esc", "g"), 64*mib); !errors.Is(err, syscall.EDQUOT) || w > 32*mib {
		t.Errorf("after the repair the pod wrote %d bytes more: %v, want EDQUOT within the 32 MiB", w, err)
	}
	unpublishAndDelete(t, d, id, staging, target)
}
