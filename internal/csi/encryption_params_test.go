package csi

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

// What fscrypt cannot encrypt is refused at create, saying why; a restore
// or clone that would change whether the data is encrypted too.
func TestCreateEncryptedVolume(t *testing.T) {
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "node"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := newControllerService(Config{NodeID: "node"}, p)
	ctx := context.Background()
	enc := map[string]string{ParamEncryption: volume.EncryptionFscrypt}
	create := func(name string, params map[string]string, c *csipb.VolumeCapability, src *csipb.VolumeContentSource) (*csipb.CreateVolumeResponse, error) {
		return s.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, Parameters: params, VolumeCapabilities: []*csipb.VolumeCapability{c},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}, VolumeContentSource: src})
	}
	for _, c := range []struct {
		name   string
		params map[string]string
		cap    *csipb.VolumeCapability
		says   string
	}{
		{"luks", map[string]string{ParamEncryption: "luks"}, capMount("", rw), "the one scheme"},
		{"block", enc, capBlock(rw), "dm-crypt"},
		{"xfs", enc, capMount("xfs", rw), "xfs has no fscrypt"},
		{"btrfs", map[string]string{ParamEncryption: "fscrypt", ParamFSType: "btrfs"}, capMount("", rw), "btrfs has none in this kernel"},
		{"directory", map[string]string{ParamEncryption: "fscrypt", "provisioningMode": "directory"}, capMount("", rw), "directory volumes"},
	} {
		_, err := create(c.name, c.params, c.cap, nil)
		if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT saying %q", c.name, err, c.says)
		}
	}
	if n := len(p.List()); n != 0 {
		t.Fatalf("refused creates left %d volumes", n)
	}
	vol, err := create("enc", enc, capMount("", rw), nil)
	if err != nil {
		t.Fatal(err)
	}
	encID := vol.GetVolume().GetVolumeId()
	if v, _ := p.Get(encID); !v.Encrypted() {
		t.Fatalf("record of an encrypted volume: %+v", v.Encryption)
	}
	plain, err := create("plain", nil, capMount("", rw), nil)
	if err != nil {
		t.Fatal(err)
	}
	fromVol := func(id string) *csipb.VolumeContentSource {
		return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	if _, err := create("clear-of-enc", nil, capMount("", rw), fromVol(encID)); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is encrypted") {
		t.Errorf("clone of an encrypted volume into a class in clear: %v", err)
	}
	if _, err := create("enc-of-clear", enc, capMount("", rw), fromVol(plain.GetVolume().GetVolumeId())); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is not encrypted") {
		t.Errorf("encrypted clone of a volume in clear: %v", err)
	}
	if _, err := create("enc-of-enc", enc, capMount("", rw), fromVol(encID)); err != nil {
		t.Errorf("encrypted clone of an encrypted volume: %v", err)
	}
}
