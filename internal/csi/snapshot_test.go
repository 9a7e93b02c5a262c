package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

func TestSizeFromSource(t *testing.T) {
	const src = 512 << 20
	tests := []struct {
		name     string
		req, lim int64
		want     int64
		code     codes.Code
	}{
		{"no size: the source's", 0, 0, src, codes.OK},
		{"smaller required: the source's", 100 << 20, 0, src, codes.OK},
		{"bigger", 1 << 30, 0, 1 << 30, codes.OK},
		{"rounded to MiB", 1<<30 + 1, 0, 1<<30 + 1<<20, codes.OK},
		{"limit below the source", 0, 256 << 20, 0, codes.OutOfRange},
		{"limit is the source", 0, src, src, codes.OK},
		{"required above limit", 2 << 30, 1 << 30, 0, codes.OutOfRange},
	}
	for _, tt := range tests {
		got, err := sizeFromSource(&csipb.CapacityRange{RequiredBytes: tt.req, LimitBytes: tt.lim}, 1<<20, src)
		if status.Code(toStatus(err)) != tt.code || (err == nil && got != tt.want) {
			t.Errorf("%s: sizeFromSource = %d, %v; want %d, %v", tt.name, got, err, tt.want, tt.code)
		}
	}
}

func TestCheckSnapshotParameters(t *testing.T) {
	ok := map[string]string{
		"csi.storage.k8s.io/volumesnapshot/name":        "s",
		"csi.storage.k8s.io/volumesnapshot/namespace":   "ns",
		"csi.storage.k8s.io/volumesnapshotcontent/name": "c",
	}
	if err := checkSnapshotParameters(ok); err != nil {
		t.Errorf("snapshotter metadata refused: %v", err)
	}
	for _, bad := range []string{"engine", "csi.storage.k8s.io/pvc/name", "provisioning"} {
		if err := checkSnapshotParameters(map[string]string{bad: "x"}); status.Code(toStatus(err)) != codes.InvalidArgument {
			t.Errorf("parameter %q = %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

func TestContentSourceRoundTrip(t *testing.T) {
	for _, src := range []volume.ContentSource{
		{Kind: volume.SourceSnapshot, ID: volid.NewSnapshot("3f9a0c2e", "s")},
		{Kind: volume.SourceVolume, ID: volid.NewVolume(volid.KindImage, "3f9a0c2e", "v")},
	} {
		cs := csiContentSource(&src)
		got, err := parseContentSource(cs)
		if err != nil || got != src {
			t.Errorf("round trip of %+v = %+v, %v", src, got, err)
		}
		if !sameContentSource(&src, cs) || sameContentSource(nil, cs) || sameContentSource(&src, nil) {
			t.Errorf("sameContentSource wrong for %+v", src)
		}
	}
	if !sameContentSource(nil, nil) || csiContentSource(nil) != nil {
		t.Error("no source must equal no source")
	}
	for _, cs := range []*csipb.VolumeContentSource{
		{},
		{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{}}},
		{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{}}},
	} {
		if _, err := parseContentSource(cs); status.Code(toStatus(err)) != codes.InvalidArgument {
			t.Errorf("parseContentSource(%v) = %v, want INVALID_ARGUMENT", cs, err)
		}
	}
}

func TestExplicitFSType(t *testing.T) {
	mount := func(fs string) *csipb.VolumeCapability {
		return &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fs}}}
	}
	block := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}
	tests := []struct {
		req  *csipb.CreateVolumeRequest
		want bool
	}{
		{&csipb.CreateVolumeRequest{VolumeCapabilities: []*csipb.VolumeCapability{mount("")}}, false},
		{&csipb.CreateVolumeRequest{VolumeCapabilities: []*csipb.VolumeCapability{block}}, false},
		{&csipb.CreateVolumeRequest{VolumeCapabilities: []*csipb.VolumeCapability{mount("xfs")}}, true},
		{&csipb.CreateVolumeRequest{Parameters: map[string]string{ParamFSType: "btrfs"}}, true},
	}
	for i, tt := range tests {
		if got := explicitFSType(tt.req); got != tt.want {
			t.Errorf("case %d: explicitFSType = %v, want %v", i, got, tt.want)
		}
	}
}

// The group parameters: the sidecar's metadata, and the deletionPolicy
// the External Storage suite copies into its class's parameters (only
// the values the class's field can have); nothing else.
func TestCheckGroupParameters(t *testing.T) {
	for _, ok := range []map[string]string{
		{"csi.storage.k8s.io/volumegroupsnapshot/name": "g", "csi.storage.k8s.io/volumegroupsnapshotcontent/name": "c"},
		{"deletionPolicy": "Delete"},
		{"deletionPolicy": "Retain", "csi.storage.k8s.io/volumegroupsnapshot/namespace": "ns"},
	} {
		if err := checkGroupParameters(ok); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
	for _, bad := range []map[string]string{
		{"deletionPolicy": "Keep"},
		{"deletionPolicy": "Delete", "engine": "x"},
		{"csi.storage.k8s.io/volumesnapshot/name": "s"},
	} {
		if err := checkGroupParameters(bad); status.Code(toStatus(err)) != codes.InvalidArgument {
			t.Errorf("%v = %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	p := map[string]string{"deletionPolicy": "Delete"}
	if checkGroupParameters(p); p["deletionPolicy"] != "Delete" {
		t.Error("the caller's parameters were changed")
	}
}
