package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/pool"
)

// Two processes sharing a pool (controller and node containers): the
// second one's index does not know a volume the first just made, so
// CreateVolume finds it only at the exclusive commit, and must still
// answer a compatible retry with that volume and an incompatible one with
// ALREADY_EXISTS, leaving nothing of its own attempt behind.
func TestCreateVolumeSeesVolumeMadeByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	first, err := pool.Open(dir, pool.Options{NodeID: "node"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := pool.Open(dir, pool.Options{NodeID: "node"})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	third, err := pool.Open(dir, pool.Options{NodeID: "node"})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	svc := func(p *pool.Pool) *ControllerService {
		return newControllerService(Config{NodeID: "node"}, p)
	}
	mountCap := []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	req := func(bytes int64) *csipb.CreateVolumeRequest {
		return &csipb.CreateVolumeRequest{Name: "shared", VolumeCapabilities: mountCap,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: bytes}}
	}
	made, err := svc(first).CreateVolume(context.Background(), req(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	id := made.GetVolume().GetVolumeId()
	if second.Known(id) || third.Known(id) {
		t.Fatal("the other pools' indexes already know the volume: the test would not test the race")
	}
	again, err := svc(second).CreateVolume(context.Background(), req(1<<30))
	if err != nil {
		t.Fatalf("compatible retry through the other process: %v", err)
	}
	if again.GetVolume().GetVolumeId() != made.GetVolume().GetVolumeId() {
		t.Errorf("retry answered volume %s, want %s", again.GetVolume().GetVolumeId(), made.GetVolume().GetVolumeId())
	}
	if _, err := svc(third).CreateVolume(context.Background(), req(2<<30)); codeOf(err) != codes.AlreadyExists {
		t.Errorf("incompatible create through another process: %v, want ALREADY_EXISTS", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("volumes/ holds %v, want the one volume's record (its image is made at first use)", names)
	}
	if n := len(first.List()); n != 1 {
		t.Errorf("pool holds %d volumes, want 1", n)
	}
}
