package csi

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

func TestParseMutable(t *testing.T) {
	start := volume.QoS{ReadIOPS: 10, WriteBytesPerSecond: 1 << 20}
	for _, tc := range []struct {
		params map[string]string
		want   volume.QoS
		err    string // a word the INVALID_ARGUMENT message must hold
	}{
		{nil, start, ""},
		{map[string]string{"writeIOPS": "50"}, volume.QoS{ReadIOPS: 10, WriteIOPS: 50, WriteBytesPerSecond: 1 << 20}, ""},
		{map[string]string{"readIOPS": "0", "writeBytesPerSecond": "16Mi"}, volume.QoS{WriteBytesPerSecond: 16 << 20}, ""},
		{map[string]string{"readBytesPerSecond": "1000000"}, volume.QoS{ReadIOPS: 10, ReadBytesPerSecond: 1e6, WriteBytesPerSecond: 1 << 20}, ""},
		{map[string]string{"readIOPS": "-1"}, start, "readIOPS"},
		{map[string]string{"readIOPS": "1Ki"}, start, "readIOPS"},
		{map[string]string{"writeBytesPerSecond": "fast"}, start, "writeBytesPerSecond"},
		{map[string]string{"provisioning": "fat"}, start, "provisioning"},
		{map[string]string{"csi.storage.k8s.io/fstype": "xfs"}, start, "cannot be modified"},
		{map[string]string{"XXX_FakeKey": "x"}, start, "XXX_FakeKey"},
	} {
		m, err := parseMutable(start, tc.params)
		got := m.QoS
		if tc.err != "" {
			if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want INVALID_ARGUMENT naming %q", tc.params, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || m.Provisioning != "" {
			t.Errorf("%v: %+v, %v; want %+v", tc.params, m, err, tc.want)
		}
	}
	if m, err := parseMutable(start, map[string]string{"provisioning": "thick"}); err != nil || m.Provisioning != "thick" || m.QoS != start {
		t.Errorf("provisioning thick: %+v, %v", m, err)
	}
}

// ControllerModifyVolume changes the record's limits and nothing else,
// idempotently; what it refuses leaves the record as it was.
func TestControllerModifyVolume(t *testing.T) {
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := newControllerService(Config{NodeID: "n"}, p)
	ctx := context.Background()
	cv, err := s.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{capBlock(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		CapacityRange:     &csipb.CapacityRange{RequiredBytes: 1 << 20},
		Parameters:        map[string]string{ParamWriteIOPS: "100"},
		MutableParameters: map[string]string{ParamReadIOPS: "200"},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := cv.GetVolume().GetVolumeId()
	limits := func() volume.QoS {
		v, err := p.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return v.Limits()
	}
	if got := limits(); got != (volume.QoS{ReadIOPS: 200, WriteIOPS: 100}) {
		t.Fatalf("limits at create: %+v", got)
	}
	modify := func(params map[string]string) error {
		_, err := s.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: params})
		return err
	}
	for range 2 { // idempotent
		if err := modify(map[string]string{ParamWriteIOPS: "0", ParamWriteBytesPerSecond: "8Mi"}); err != nil {
			t.Fatal(err)
		}
		if got := limits(); got != (volume.QoS{ReadIOPS: 200, WriteBytesPerSecond: 8 << 20}) {
			t.Fatalf("limits after modify: %+v", got)
		}
	}
	wantCode(t, "immutable", modify(map[string]string{ParamWriteIOPS: "5", ParamFSType: "xfs"}), codes.InvalidArgument)
	if got := limits(); got != (volume.QoS{ReadIOPS: 200, WriteBytesPerSecond: 8 << 20}) {
		t.Fatalf("a refused modify changed the limits: %+v", got)
	}
	_, err = s.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id + "x"})
	wantCode(t, "missing volume", err, codes.NotFound)
	_, err = s.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{})
	wantCode(t, "no ID", err, codes.InvalidArgument)
	// Removing every limit leaves a record like one never limited.
	if err := modify(map[string]string{ParamReadIOPS: "0", ParamWriteBytesPerSecond: "0"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Get(id); v.QoS != nil {
		t.Fatalf("no limits left, record keeps %+v", v.QoS)
	}
}

// Thin to thick reserves the image's space, or is RESOURCE_EXHAUSTED with
// the record and the image as they were; thick to thin changes the record.
func TestControllerModifyProvisioning(t *testing.T) {
	dir := t.TempDir()
	p, err := pool.Open(dir, pool.Options{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const size = 8 << 20
	v, err := p.Create(ctx, volume.CreateRequest{Name: "v", CapacityBytes: size})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	allocated := func(p *pool.Pool) int64 {
		var st unix.Stat_t
		if err := unix.Stat(p.ImagePath(v.ID), &st); err != nil {
			return -1 // a blank thin volume has no image yet
		}
		return st.Blocks * 512
	}

	// A pool that keeps all but nothing in reserve has no room.
	full, err := pool.Open(dir, pool.Options{NodeID: "n", ReservedBytes: 1 << 60})
	if err != nil {
		t.Fatal(err)
	}
	s := newControllerService(Config{NodeID: "n"}, full)
	thick := &csipb.ControllerModifyVolumeRequest{VolumeId: v.ID, MutableParameters: map[string]string{ParamProvisioning: "thick", ParamReadIOPS: "7"}}
	_, err = s.ControllerModifyVolume(ctx, thick)
	wantCode(t, "thick on a full pool", err, codes.ResourceExhausted)
	if got, _ := full.Get(v.ID); got.Provisioning != volume.ProvisioningThin || got.QoS != nil || allocated(full) != -1 {
		t.Fatalf("after RESOURCE_EXHAUSTED: %s, limits %+v, %d bytes allocated; want it unchanged", got.Provisioning, got.QoS, allocated(full))
	}
	full.Close()

	p, err = pool.Open(dir, pool.Options{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s = newControllerService(Config{NodeID: "n"}, p)
	for range 2 {
		if _, err := s.ControllerModifyVolume(ctx, thick); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := p.Get(v.ID); got.Provisioning != volume.ProvisioningThick || got.Limits().ReadIOPS != 7 || allocated(p) < size {
		t.Fatalf("after thick: %s, limits %+v, %d bytes allocated", got.Provisioning, got.Limits(), allocated(p))
	}
	if _, err := s.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: v.ID, MutableParameters: map[string]string{ParamProvisioning: "thin"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Get(v.ID); got.Provisioning != volume.ProvisioningThin || got.Limits().ReadIOPS != 7 {
		t.Fatalf("after thin: %s, limits %+v", got.Provisioning, got.Limits())
	}
}
