package csi

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volid"
)

// provisioningMode: directory sends CreateVolume to the store of the
// directory kind and nothing else does; without a directory pool served
// it is FAILED_PRECONDITION naming the flag; its parameters are checked
// before any store is called. (test/dirvol runs the real directory pool.)
func TestProvisioningModeSelectsTheDirectoryStore(t *testing.T) {
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	s := newControllerService(Config{NodeID: "n1"}, p)
	ctx := context.Background()
	dirParams := map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory}
	req := func(name string, params map[string]string) *csipb.CreateVolumeRequest {
		return &csipb.CreateVolumeRequest{Name: name, Parameters: params, VolumeCapabilities: mountRW,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20}}
	}
	_, err = s.CreateVolume(ctx, req("d0", dirParams))
	wantCode(t, "directory volume without a directory pool", err, codes.FailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "--dir-pool-dir") {
		t.Errorf("the refusal does not name the flag: %v", err)
	}

	f := newFakeStore(t)
	// Made for provisioningMode: directory, with a directory volume's
	// parameters.
	f.traits = dirpool.Traits
	f.check = func(params map[string]string) error { _, err := dirpool.Parameters(params); return err }
	s.serve(fakePool, volid.KindDir, f)
	if _, err := s.CreateVolume(ctx, req("d1", dirParams)); err != nil || !f.took("create d1") {
		t.Fatalf("CreateVolume with provisioningMode: directory: %v; calls %s", err, f)
	}
	made, err := s.CreateVolume(ctx, req("i1", nil))
	if err != nil || f.took("create i1") {
		t.Fatalf("an image volume went to the directory store: %v; calls %s", err, f)
	}
	if v, _ := volid.ParseVolume(made.GetVolume().GetVolumeId()); v.Kind != volid.KindImage {
		t.Errorf("made %s", made.GetVolume().GetVolumeId())
	}
	for what, params := range map[string]map[string]string{
		"unknown":   {dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory, "fsType": "ext4"},
		"other":     {dirpool.ParamProvisioningMode: "efs-ap"},
		"escape":    {dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory, dirpool.ParamBasePath: "../x"},
		"bad perms": {dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory, dirpool.ParamDirectoryPerms: "rwx"},
	} {
		_, err := s.CreateVolume(ctx, req("bad-"+strings.ReplaceAll(what, " ", "-"), params))
		wantCode(t, what, err, codes.InvalidArgument)
	}
	if strings.Count(f.String(), "create") != 1 {
		t.Errorf("the store saw refused creates: %s", f)
	}
}
