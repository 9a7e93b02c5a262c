package ctl

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeCSI answers every call ctl makes and keeps each request, so a
// test can check that a command sends what its flags say.
type fakeCSI struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedControllerServer
	csipb.UnimplementedNodeServer
	mu   sync.Mutex
	reqs []proto.Message
}

func (f *fakeCSI) got(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, m)
}

func (f *fakeCSI) take() []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reqs
	f.reqs = nil
	return r
}

func (f *fakeCSI) GetPluginInfo(_ context.Context, r *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	f.got(r)
	return &csipb.GetPluginInfoResponse{Name: "filevol.csi.io", VendorVersion: "test"}, nil
}

func (f *fakeCSI) NodeGetInfo(_ context.Context, r *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	f.got(r)
	return &csipb.NodeGetInfoResponse{NodeId: "n1"}, nil
}

func (f *fakeCSI) GetCapacity(_ context.Context, r *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	f.got(r)
	return &csipb.GetCapacityResponse{AvailableCapacity: 42}, nil
}

func (f *fakeCSI) CreateVolume(_ context.Context, r *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	f.got(r)
	if r.GetName() == "refused" {
		return nil, status.Error(codes.ResourceExhausted, "not enough space in the pool")
	}
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "fv1-" + r.GetName(), CapacityBytes: r.GetCapacityRange().GetRequiredBytes()}}, nil
}

func (f *fakeCSI) ListVolumes(_ context.Context, r *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	f.got(r)
	if r.GetStartingToken() == "" {
		return &csipb.ListVolumesResponse{Entries: []*csipb.ListVolumesResponse_Entry{{Volume: &csipb.Volume{VolumeId: "a"}}}, NextToken: "1"}, nil
	}
	return &csipb.ListVolumesResponse{Entries: []*csipb.ListVolumesResponse_Entry{{Volume: &csipb.Volume{VolumeId: "b"}}}}, nil
}

func (f *fakeCSI) ControllerGetVolume(_ context.Context, r *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	f.got(r)
	return &csipb.ControllerGetVolumeResponse{Volume: &csipb.Volume{VolumeId: r.GetVolumeId()}}, nil
}

func (f *fakeCSI) DeleteVolume(_ context.Context, r *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	f.got(r)
	return &csipb.DeleteVolumeResponse{}, nil
}

func (f *fakeCSI) NodeStageVolume(_ context.Context, r *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	f.got(r)
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (f *fakeCSI) NodePublishVolume(_ context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	f.got(r)
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (f *fakeCSI) NodeGetVolumeStats(_ context.Context, r *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	f.got(r)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{{Total: 7}}}, nil
}

func (f *fakeCSI) NodeUnpublishVolume(_ context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	f.got(r)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (f *fakeCSI) NodeUnstageVolume(_ context.Context, r *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	f.got(r)
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// serve starts the fake on a unix socket and returns its endpoint.
func serve(t *testing.T) (*fakeCSI, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCSI{}
	s := grpc.NewServer()
	csipb.RegisterIdentityServer(s, f)
	csipb.RegisterControllerServer(s, f)
	csipb.RegisterNodeServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return f, "unix://" + sock
}

func run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Wrong use is exit code 2 with a line that says what is wrong; --help
// is 0.
func TestUsage(t *testing.T) {
	t.Setenv("FILEVOL_ENDPOINT", "")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{nil, 2, "usage: filevol ctl"},
		{[]string{"--help"}, 0, "usage: filevol ctl"},
		{[]string{"info"}, 2, "no endpoint: pass --endpoint or set FILEVOL_ENDPOINT"},
		{[]string{"--endpoint", "unix:///tmp/x.sock", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"--endpoint", "ftp://host", "info"}, 2, "filevol ctl:"},
	} {
		code, _, errOut := run(c.args...)
		if code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("ctl %v: exit %d, %q; want %d saying %q", c.args, code, errOut, c.code, c.says)
		}
	}
}

// Each command sends the request its arguments and flags describe, and
// prints the answer.
func TestCommandsSendWhatTheySay(t *testing.T) {
	f, ep := serve(t)
	ctl := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(append([]string{"--endpoint", ep}, args...)...)
		if code != 0 {
			t.Fatalf("ctl %v: exit %d: %s", args, code, errOut)
		}
		// protojson's spacing is deliberately unstable: one space each.
		return strings.Join(strings.Fields(out), " ")
	}
	out := ctl("create", "data", "--size", "2Gi", "--fstype", "xfs", "--param", "a=b", "--param", "c=d=e")
	cr := f.take()[0].(*csipb.CreateVolumeRequest)
	if cr.GetName() != "data" || cr.GetCapacityRange().GetRequiredBytes() != 2<<30 ||
		cr.GetVolumeCapabilities()[0].GetMount().GetFsType() != "xfs" || cr.GetParameters()["a"] != "b" || cr.GetParameters()["c"] != "d=e" {
		t.Errorf("create sent %v", cr)
	}
	if !strings.Contains(out, `"volumeId": "fv1-data"`) {
		t.Errorf("create printed %q", out)
	}
	ctl("create", "--block", "raw")
	if cr := f.take()[0].(*csipb.CreateVolumeRequest); cr.GetName() != "raw" || cr.GetVolumeCapabilities()[0].GetBlock() == nil ||
		cr.GetCapacityRange().GetRequiredBytes() != 1<<30 {
		t.Errorf("create --block (argument after the flags) sent %v, want a 1 GiB block volume", cr)
	}

	if out := ctl("stage", "v1", "--staging", "/s", "--ro"); !strings.Contains(out, "staged v1 at /s") {
		t.Errorf("stage printed %q", out)
	}
	sr := f.take()[0].(*csipb.NodeStageVolumeRequest)
	if sr.GetVolumeId() != "v1" || sr.GetStagingTargetPath() != "/s" ||
		sr.GetVolumeCapability().GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY {
		t.Errorf("stage sent %v", sr)
	}
	ctl("publish", "v1", "--staging", "/s", "--target", "/t", "--block", "--ro")
	if pr := f.take()[0].(*csipb.NodePublishVolumeRequest); pr.GetTargetPath() != "/t" || !pr.GetReadonly() || pr.GetVolumeCapability().GetBlock() == nil {
		t.Errorf("publish sent %v", pr)
	}
	if out := ctl("stats", "v1", "--path", "/t"); !strings.Contains(out, `"total": "7"`) {
		t.Errorf("stats printed %q", out)
	}
	if r := f.take()[0].(*csipb.NodeGetVolumeStatsRequest); r.GetVolumePath() != "/t" {
		t.Errorf("stats sent %v", r)
	}
	ctl("unpublish", "v1", "--target", "/t")
	ctl("unstage", "v1", "--staging", "/s")
	if out := ctl("delete", "v1"); !strings.Contains(out, "deleted v1") {
		t.Errorf("delete printed %q", out)
	}
	reqs := f.take()
	if len(reqs) != 3 || reqs[0].(*csipb.NodeUnpublishVolumeRequest).GetTargetPath() != "/t" ||
		reqs[1].(*csipb.NodeUnstageVolumeRequest).GetStagingTargetPath() != "/s" || reqs[2].(*csipb.DeleteVolumeRequest).GetVolumeId() != "v1" {
		t.Errorf("unpublish, unstage, delete sent %v", reqs)
	}

	ctl("get", "v2")
	if r := f.take()[0].(*csipb.ControllerGetVolumeRequest); r.GetVolumeId() != "v2" {
		t.Errorf("get sent %v", r)
	}
	if out := ctl("list"); !strings.Contains(out, `"volumeId": "a"`) || !strings.Contains(out, `"volumeId": "b"`) {
		t.Errorf("list printed %q, want both pages", out)
	}
	if reqs := f.take(); len(reqs) != 2 || reqs[1].(*csipb.ListVolumesRequest).GetStartingToken() != "1" {
		t.Errorf("list sent %v, want the second page asked with the token", reqs)
	}
	if out := ctl("info"); !strings.Contains(out, "filevol.csi.io") || !strings.Contains(out, `"nodeId": "n1"`) || !strings.Contains(out, "42") {
		t.Errorf("info printed %q", out)
	}
}

// A refused call is exit code 1 with the driver's code and message; a
// missing argument or a bad flag too, before anything is sent.
func TestFailuresSayWhy(t *testing.T) {
	f, ep := serve(t)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"create", "refused"}, "ResourceExhausted desc = not enough space in the pool"},
		{[]string{"delete"}, "delete: missing argument"},
		{[]string{"create", "x", "--param", "novalue"}, `--param "novalue": want key=value`},
		{[]string{"create", "x", "--size", "lots"}, "lots"},
	} {
		code, _, errOut := run(append([]string{"--endpoint", ep}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.says) {
			t.Errorf("ctl %v: exit %d, %q; want 1 saying %q", c.args, code, errOut, c.says)
		}
	}
	if reqs := f.take(); len(reqs) != 1 {
		t.Errorf("%d requests sent, want only the refused create's", len(reqs))
	}
}
