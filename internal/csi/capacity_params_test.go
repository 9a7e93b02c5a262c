package csi

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/pool"
)

// csi-provisioner's capacity tracking sends a class's parameters as they
// are, Secret references included: GetCapacity answers for an encrypted
// class that names its node-stage Secret as for any other, and still
// refuses a parameter it does not know.
func TestGetCapacityIgnoresSecretReferences(t *testing.T) {
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := newControllerService(Config{NodeID: "n1"}, p)
	params := map[string]string{
		"encryption": "fscrypt", ParamFSType: "ext4",
		"csi.storage.k8s.io/node-stage-secret-name":        "volume-key",
		"csi.storage.k8s.io/node-stage-secret-namespace":   "${pvc.namespace}",
		"csi.storage.k8s.io/provisioner-secret-name":       "p",
		"csi.storage.k8s.io/controller-expand-secret-name": "e",
	}
	resp, err := s.GetCapacity(context.Background(), &csipb.GetCapacityRequest{Parameters: params})
	if err != nil {
		t.Fatalf("GetCapacity with Secret references: %v", err)
	}
	if resp.GetAvailableCapacity() <= 0 {
		t.Fatalf("GetCapacity with Secret references: %+v, want the pool's room", resp)
	}
	params["csi.storage.k8s.io/node-stage-secret"] = "x" // not a reference: unknown
	if _, err := s.GetCapacity(context.Background(), &csipb.GetCapacityRequest{Parameters: params}); codeOf(err) != codes.InvalidArgument {
		t.Fatalf("an unknown parameter: %v, want INVALID_ARGUMENT", err)
	}
}
