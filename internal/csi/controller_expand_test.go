package csi

import (
	"context"
	"testing"

	"github.com/filevol/filevol/internal/volid"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/pool"
)

// A controller without the nodes' pools (the resizer's Deployment) defers
// expansion of a volume it cannot see to the volume's node; without
// --defer-expansion-to-node the same call is NOT_FOUND.
func TestControllerExpandDefersToNode(t *testing.T) {
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "controller"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	id := volid.NewVolume(volid.KindImage, "0badc0de", "lives-on-a-node") // another node's pool
	req := &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 3<<30 + 1}}

	strict := newControllerService(Config{NodeID: "controller"}, p)
	if _, err := strict.ControllerExpandVolume(context.Background(), req); codeOf(err) != codes.NotFound {
		t.Fatalf("without deferral: %v, want NOT_FOUND", err)
	}
	deferring := newControllerService(Config{NodeID: "controller", DeferExpansion: true}, p)
	resp, err := deferring.ControllerExpandVolume(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetNodeExpansionRequired() || resp.GetCapacityBytes() != 3<<30+allocationUnit {
		t.Fatalf("got %+v, want node expansion to %d", resp, int64(3<<30+allocationUnit))
	}
	req.CapacityRange.LimitBytes = 3 << 30
	if _, err := deferring.ControllerExpandVolume(context.Background(), req); codeOf(err) != codes.OutOfRange {
		t.Fatalf("limit below the rounded size: %v, want OUT_OF_RANGE", err)
	}
}
