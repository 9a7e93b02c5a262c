// Package kubesim plays the parts of Kubernetes that drive filevol's CSI
// services in the tests that run filevol as processes of their own: kubelet
// staging and publishing a volume on a node for a pod and taking it down
// when the pod is gone, and the external-attacher's reading of the
// controller's answer to ControllerPublishVolume. The tests then call the
// services in the order a cluster does, with the paths kubelet gives.
package kubesim

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Node is kubelet on one node, for one volume at a time: the node's
// filevol and the staging and target paths kubelet would give it.
type Node struct {
	Name            string
	Client          csipb.NodeClient
	Staging, Target string
}

// Kubelet's calls are made with a context of their own, not the test's:
// a test's context ends before its cleanups run, and a cleanup may take a
// volume down as kubelet does.
var bg = context.Background()

// Stage asks the node to stage the volume, and returns its answer: for
// the tests that expect a refusal.
func (n Node) Stage(id string, vc *csipb.VolumeCapability, pc map[string]string) error {
	_, err := n.Client.NodeStageVolume(bg, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: n.Staging,
		VolumeCapability: vc, PublishContext: pc})
	return err
}

// Use stages and publishes the volume, as kubelet does for a pod; either
// failing fails the test.
func (n Node) Use(t testing.TB, id string, vc *csipb.VolumeCapability, pc map[string]string) {
	t.Helper()
	if err := n.Stage(id, vc, pc); err != nil {
		t.Fatalf("NodeStageVolume %s on %s: %v", id, n.Name, err)
	}
	if _, err := n.Client.NodePublishVolume(bg, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: n.Staging,
		TargetPath: n.Target, VolumeCapability: vc, PublishContext: pc}); err != nil {
		t.Fatalf("NodePublishVolume %s on %s: %v", id, n.Name, err)
	}
}

// Release unpublishes and unstages the volume, as kubelet does when the
// pod is gone; either failing fails the test.
func (n Node) Release(t testing.TB, id string) {
	t.Helper()
	if _, err := n.Client.NodeUnpublishVolume(bg, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: n.Target}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s on %s: %v", id, n.Name, err)
	}
	if _, err := n.Client.NodeUnstageVolume(bg, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: n.Staging}); err != nil {
		t.Fatalf("NodeUnstageVolume %s on %s: %v", id, n.Name, err)
	}
}

// BlockCapability is what a pod's ReadWriteOnce claim of volumeMode Block
// asks of the driver.
func BlockCapability() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
	}
}

// FilesystemCapability is what a pod's ReadWriteOnce claim of volumeMode
// Filesystem asks of the driver, with the class's fsType.
func FilesystemCapability(fsType string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType}},
	}
}

// IsFencingRefusal reports whether err is the controller's refusal of
// ControllerPublishVolume while another node's device still holds the
// volume's image: the answer the external-attacher retries until the old
// node's hold is gone, where any other error is a failure.
func IsFencingRefusal(err error) bool {
	return status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "still holds the image")
}
