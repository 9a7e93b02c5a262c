package csi

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/pool"
)

func TestParseMutable(t *testing.T) {
	start := pool.QoS{ReadIOPS: 10, WriteBytesPerSecond: 1 << 20}
	for _, tc := range []struct {
		params map[string]string
		want   pool.QoS
		err    string // a word the INVALID_ARGUMENT message must hold
	}{
		{nil, start, ""},
		{map[string]string{"writeIOPS": "50"}, pool.QoS{ReadIOPS: 10, WriteIOPS: 50, WriteBytesPerSecond: 1 << 20}, ""},
		{map[string]string{"readIOPS": "0", "writeBytesPerSecond": "16Mi"}, pool.QoS{WriteBytesPerSecond: 16 << 20}, ""},
		{map[string]string{"readBytesPerSecond": "1000000"}, pool.QoS{ReadIOPS: 10, ReadBytesPerSecond: 1e6, WriteBytesPerSecond: 1 << 20}, ""},
		{map[string]string{"readIOPS": "-1"}, start, "readIOPS"},
		{map[string]string{"readIOPS": "1Ki"}, start, "readIOPS"},
		{map[string]string{"writeBytesPerSecond": "fast"}, start, "writeBytesPerSecond"},
		{map[string]string{"provisioning": "thick"}, start, "cannot be modified"},
		{map[string]string{"csi.storage.k8s.io/fstype": "xfs"}, start, "cannot be modified"},
		{map[string]string{"XXX_FakeKey": "x"}, start, "XXX_FakeKey"},
	} {
		got, err := parseMutable(start, tc.params)
		if tc.err != "" {
			if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want INVALID_ARGUMENT naming %q", tc.params, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.params, got, err, tc.want)
		}
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
	limits := func() pool.QoS {
		v, err := p.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return v.Limits()
	}
	if got := limits(); got != (pool.QoS{ReadIOPS: 200, WriteIOPS: 100}) {
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
		if got := limits(); got != (pool.QoS{ReadIOPS: 200, WriteBytesPerSecond: 8 << 20}) {
			t.Fatalf("limits after modify: %+v", got)
		}
	}
	wantCode(t, "immutable", modify(map[string]string{ParamWriteIOPS: "5", ParamProvisioning: "thick"}), codes.InvalidArgument)
	if got := limits(); got != (pool.QoS{ReadIOPS: 200, WriteBytesPerSecond: 8 << 20}) {
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
