package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/volume"
)

// The secrets of CreateVolume, CreateSnapshot, NodeStage, NodePublish and
// NodeExpand reach the backend's request; printed there they show only
// their number, and they cannot be marshalled into a record.
func TestSecretsReachTheBackend(t *testing.T) {
	ctx := context.Background()
	sec := map[string]string{"key": "s3cr3t"}

	f := newFakeStore(t)
	s := &ControllerService{cfg: Config{NodeID: "n1"}, locks: newInflight()}
	s.serve(fakePool, fakeKind, f)
	made, err := s.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: mountRW, Secrets: sec,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: made.GetVolume().GetVolumeId(), Secrets: sec}); err != nil {
		t.Fatal(err)
	}
	for _, call := range []string{"create", "snapshot"} {
		if !f.took("secret " + call + " key=s3cr3t") {
			t.Errorf("%s: the backend did not get the secrets; calls %s", call, f)
		}
	}

	e := newNodeEnv(t)
	n := newFakeNode(t)
	e.node.serve(fakePool, fakeKind, n)
	id := n.volume("v")
	staging, target := e.staging("v"), e.target("v")
	if _, err := e.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: capMount("", rw), Secrets: sec}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: capMount("", rw), Secrets: sec}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target,
		StagingTargetPath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 30}, Secrets: sec}); err != nil {
		t.Fatal(err)
	}
	for _, call := range []string{"stage", "publish", "expand"} {
		if !n.took("secret " + call + " key=s3cr3t") {
			t.Errorf("%s: the backend did not get the secrets; calls %s", call, n)
		}
		if !n.took(call+" "+id) || !strings.Contains(n.String(), "Secrets:<1 secret(s), redacted>") {
			t.Errorf("%s: the request printed does not redact its secrets; calls %s", call, n)
		}
	}
	for _, c := range strings.Split(n.String(), "; ") {
		if strings.Contains(c, "s3cr3t") && !strings.HasPrefix(c, "secret ") {
			t.Errorf("a printed request holds a secret's value: %s", c)
		}
	}

	req := volume.CreateRequest{Name: "x", Secrets: sec}
	if out := fmt.Sprintf("%v %+v %#v", req, req, req); strings.Contains(out, "s3cr3t") {
		t.Errorf("a request printed shows a secret: %s", out)
	}
	if b, err := json.Marshal(req); err == nil || !strings.Contains(err.Error(), "never marshalled") {
		t.Errorf("a request with secrets marshalled: %s, %v", b, err)
	}
}
