package split

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/proc"
)

// A shared pool: one pool directory that a controller process and node
// processes with their own node IDs and kubelet directories all open
// with --pool-shared, as a controller Deployment and a node DaemonSet on
// a filesystem every node mounts would.

// startSharedController starts the controller of the shared pool dir/pool.
func startSharedController(t *testing.T, bin, dir string) *proc.Proc {
	t.Helper()
	return proc.Start(t, bin, dir, "controller", "--mode", "controller", "--pool-shared", "--pool-name", "shared-test",
		"--node-id", "controller-host", "--kubelet-dir", dir)
}

// startSharedNode starts node on the shared pool dir/pool, with its own
// kubelet directory dir/<node>.
func startSharedNode(t *testing.T, bin, dir, node string) *proc.Proc {
	t.Helper()
	kubelet := filepath.Join(dir, node)
	if err := os.MkdirAll(kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	return proc.Start(t, bin, dir, node, "--mode", "node", "--pool-shared", "--pool-name", "shared-test",
		"--node-id", node, "--kubelet-dir", kubelet)
}

// sharedNode is a node process of the shared pool and its kubelet paths
// for one volume.
type sharedNode struct {
	name            string
	p               *proc.Proc
	node            csipb.NodeClient
	staging, target string
}

func newSharedNode(t *testing.T, bin, dir, name string) *sharedNode {
	p := startSharedNode(t, bin, dir, name)
	return &sharedNode{name: name, p: p, node: csipb.NewNodeClient(p.Conn),
		staging: filepath.Join(dir, name, "staging"), target: filepath.Join(dir, name, "target")}
}

func (n *sharedNode) stageAndPublish(ctx context.Context, id string, c *csipb.VolumeCapability, pc map[string]string) error {
	if _, err := n.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: n.staging,
		VolumeCapability: c, PublishContext: pc}); err != nil {
		return err
	}
	_, err := n.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: n.staging,
		TargetPath: n.target, VolumeCapability: c, PublishContext: pc})
	return err
}

func (n *sharedNode) unpublishAndUnstage(ctx context.Context, id string) error {
	if _, err := n.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: n.target}); err != nil {
		return err
	}
	_, err := n.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: n.staging})
	return err
}

// wantCode fails unless err has code and a message holding every part.
func wantCode(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s = %v, want %s", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s = %v, want a message naming %q", what, err, p)
		}
	}
}

// TestSharedVolumeFollowsItsPod: a volume of a shared pool is attached to
// node A, written there, refused to node B (Multi-Attach), force-detached
// from A while A's filevol is dead and A's loop device still holds the
// image (B's attach is fenced off for as long as it does), then, once A's
// device is gone, attached to B with its data intact.
func TestSharedVolumeFollowsItsPod(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "split-shared-story")
	bin := proc.BuildDriver(t)
	ctrlProc := startSharedController(t, bin, dir)
	ctrl := csipb.NewControllerClient(ctrlProc.Conn)
	a, b := newSharedNode(t, bin, dir, "node-a"), newSharedNode(t, bin, dir, "node-b")
	ctx := context.Background()

	c := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
	}
	created, err := ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "follows", VolumeCapabilities: []*csipb.VolumeCapability{c},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	vol := created.GetVolume()
	id := vol.GetVolumeId()
	if seg := vol.GetAccessibleTopology()[0].GetSegments(); seg[csi.PoolTopologyKey] != "shared-test" || len(seg) != 1 {
		t.Fatalf("topology of a shared volume = %v, want only %s=shared-test", seg, csi.PoolTopologyKey)
	}
	info, err := a.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || info.GetAccessibleTopology().GetSegments()[csi.PoolTopologyKey] != "shared-test" {
		t.Fatalf("NodeGetInfo of node-a = %v, %v; want the pool's segment", info, err)
	}

	publish := func(node string) (*csipb.ControllerPublishVolumeResponse, error) {
		return ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: c})
	}
	_, err = b.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: b.staging, VolumeCapability: c})
	wantCode(t, "NodeStageVolume without an attachment", err, codes.FailedPrecondition, "ControllerPublishVolume must attach it")
	_, err = publish("node-z")
	wantCode(t, "ControllerPublishVolume to a node that never opened the pool", err, codes.NotFound, "node-z")

	onA, err := publish("node-a")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := publish("node-a"); err != nil || again.GetPublishContext()["filevol.csi.io/attach-epoch"] != onA.GetPublishContext()["filevol.csi.io/attach-epoch"] {
		t.Fatalf("repeated ControllerPublishVolume = %v, %v; want the same attachment", again, err)
	}
	if err := a.stageAndPublish(ctx, id, c, onA.GetPublishContext()); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("follows its pod "), 4096)
	if err := os.WriteFile(filepath.Join(a.target, "data"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
	if err != nil || strings.Join(got.GetStatus().GetPublishedNodeIds(), ",") != "node-a" {
		t.Fatalf("published on %v (%v), want node-a", got.GetStatus().GetPublishedNodeIds(), err)
	}

	_, err = publish("node-b")
	wantCode(t, "ControllerPublishVolume to node-b while node-a has it", err, codes.FailedPrecondition, "attached to node node-a")
	_, err = b.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: b.staging,
		VolumeCapability: c, PublishContext: onA.GetPublishContext()})
	wantCode(t, "NodeStageVolume on node-b with node-a's publish_context", err, codes.FailedPrecondition, "for node node-a")

	// Node A's filevol dies; its kernel keeps the loop device and the
	// mount, as a pod's writes would. Kubernetes force-detaches.
	if err := a.p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.p.Exited
	if _, err := ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}); err != nil {
		t.Fatalf("force-detach from node-a: %v", err)
	}
	_, err = publish("node-b")
	wantCode(t, "ControllerPublishVolume to node-b while node-a's device still holds the image", err, codes.FailedPrecondition,
		"node node-a", "still holds the image")
	// Still writable on A: nothing of B reached the image, and A's bytes
	// are the volume's.
	if err := os.WriteFile(filepath.Join(a.target, "late"), []byte("written on A after the force-detach"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A's filevol comes back; its old publish_context no longer stages
	// the volume, and kubelet's unpublish and unstage release the image.
	a.p = startSharedNode(t, bin, dir, "node-a")
	a.node = csipb.NewNodeClient(a.p.Conn)
	_, err = a.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: a.staging,
		VolumeCapability: c, PublishContext: onA.GetPublishContext()})
	wantCode(t, "NodeStageVolume on node-a with its detached attachment", err, codes.FailedPrecondition, "not attached to this node")
	if err := a.unpublishAndUnstage(ctx, id); err != nil {
		t.Fatal(err)
	}

	onB, err := publish("node-b")
	if err != nil {
		t.Fatalf("ControllerPublishVolume to node-b once node-a let go: %v", err)
	}
	if err := b.stageAndPublish(ctx, id, c, onB.GetPublishContext()); err != nil {
		t.Fatal(err)
	}
	if read, err := os.ReadFile(filepath.Join(b.target, "data")); err != nil || !bytes.Equal(read, data) {
		t.Fatalf("data on node-b: %d bytes, %v; want what node-a wrote", len(read), err)
	}
	if read, err := os.ReadFile(filepath.Join(b.target, "late")); err != nil || len(read) == 0 {
		t.Fatalf("node-a's last write on node-b: %q, %v", read, err)
	}
	_, err = ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume of a staged, attached volume", err, codes.FailedPrecondition, "node-b")
	if err := b.unpublishAndUnstage(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err = ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume of an attached volume", err, codes.FailedPrecondition, "still attached to node node-b")
	for range 2 {
		if _, err := ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-b"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-b"}); err != nil {
		t.Fatalf("ControllerUnpublishVolume of a deleted volume: %v", err)
	}
	ctrlProc.Stop(t)
	a.p.Stop(t)
	b.p.Stop(t)
	checkNoLeaks(t, dir)
}
