package csi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volume"
)

// A node that is gone keeps its loop device's lock on a volume's image
// for as long as the pool's filesystem keeps its client: on CephFS until
// the MDS gives up on it (session_timeout, 60 s by default), during which
// any look at the image (a stat, an open, the lock's query) waits for the
// gone writer's capabilities, and so does a read of a file the node wrote
// when its client is silent rather than dead (power lost, link cut: no
// connection reset tells the MDS) (docs/shared-pools-cephfs.md). A kind
// that can cut a node's client off the storage (a clientFencer: the image
// kind on CephFS, given the cluster's credentials in the
// controller-publish Secret) does so here, before anything looks at the
// image: at the force-detach (ControllerUnpublishVolume of a node whose
// in-use record says it still stages the volume: a node that unstaged has
// none, and Kubernetes detaches a node that has not unstaged only when it
// gives up on it) and at another node's attach after such a detach
// without credentials. Which client: the one the node's in-use record
// names; if that record does not answer in a few seconds while the pool
// does, the node's client is silent, and the one its attachment record
// names (noted by the node, read at ControllerPublishVolume while it was
// alive: controller_silent.go). Measured on CephFS, a cut-off node's
// force-detach returns in seconds instead of 62 s. The node's client is
// then fenced for every volume it mounts, which is what a force-detach of
// a gone node means. Without credentials nothing changes but the refusal,
// which says what they would do.

// clientFencer is a kind that can cut a node's client off the pool's
// storage. FenceClient returns volume.ErrNoFenceCredentials when the
// request's secrets hold none of its credentials, errors.ErrUnsupported
// when the pool's filesystem has no client it can fence.
type clientFencer interface {
	FenceClient(ctx context.Context, req volume.FenceRequest) error
}

// unlockWait bounds how long a fence waits for the image's lock to go
// once the node's client is cut off (1.1 s measured on CephFS).
const unlockWait = 10 * time.Second

// fenceGone fences node off volume id when the kind can and the node's
// client is known: named by its in-use record (it still stages the
// volume) with its device's detach not pending (a node that reports that
// is alive: its holders are named instead), or, when that record does not
// answer while the pool does, noted, the client its attachment recorded
// (controller_silent.go). Having fenced, it returns once the image's lock
// is gone (or after unlockWait). When the request's secrets hold no
// credentials it returns what they would have done (for a refusal or a
// log line); silent says the node's records do not answer (no refusal
// reads them then); an error means nothing was changed. call names the
// CSI call, for messages.
func (s *ControllerService) fenceGone(ctx context.Context, st *poolStore, call, id, node string, noted *inuse.Client, secrets volume.Secrets) (hint string, silent bool, err error) {
	f, ok := st.VolumeStore.(clientFencer)
	image, isImage := st.VolumeStore.(imagePather)
	if !ok || !isImage || node == "" {
		return "", false, nil
	}
	begin := time.Now()
	e, ok, silent, err := s.inUseOf(ctx, st, id, node, noted != nil)
	switch {
	case err != nil:
		return "", false, err
	case silent:
		e.Client = noted
	case !ok || e.Client == nil || e.Pending != nil:
		return "", false, nil
	}
	c := storageClient(e.Client)
	read := time.Since(begin)
	err = f.FenceClient(ctx, volume.FenceRequest{Call: call, VolumeID: id, Node: node, Client: c, Secrets: secrets})
	if errors.Is(err, volume.ErrNoFenceCredentials) {
		return fenceHint(node, c, silent), silent, nil
	}
	if errors.Is(err, errors.ErrUnsupported) {
		return "", silent, nil
	}
	if err != nil {
		return "", silent, err
	}
	evicted := time.Since(begin) - read
	err = waitUnlocked(ctx, image.ImagePath(id))
	klog.InfoS("node fenced: its client of the pool's storage was evicted, so every volume it mounts through that client is cut off, not only this one; the node must mount the pool again before it serves anything",
		"call", call, "volumeID", id, "node", node, "client", c.ID, "cluster", c.Cluster, "silent", silent,
		"clientKnownIn", read.Round(time.Millisecond), "evictedIn", evicted.Round(time.Millisecond),
		"lockGoneIn", (time.Since(begin) - read - evicted).Round(time.Millisecond), "err", err)
	return "", silent, err
}

// waitUnlocked waits, at most unlockWait, for the image's lock to go.
func waitUnlocked(ctx context.Context, image string) error {
	for end := time.Now().Add(unlockWait); time.Now().Before(end); {
		if held, err := loop.Locked(image); err != nil || !held {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil // the attach's own fence check says what still holds
}

// storageClient is the vocabulary's form of a record's client.
func storageClient(c *inuse.Client) volume.StorageClient {
	return volume.StorageClient{Kind: c.Kind, ID: c.ID, Cluster: c.Cluster}
}

// fenceHint says what the cluster's credentials would have done about
// node's client c, silent when it does not answer.
func fenceHint(node string, c volume.StorageClient, silent bool) string {
	how := "staged it through"
	if silent {
		how = "does not answer (its in-use record did not, the pool did), attached through"
	}
	return fmt.Sprintf("node %s "+how+" %s client %d: the controller would evict that client itself (fencing the whole node) on the force-detach or this attach, "+
		"were it given the cluster's credentials (adminID and adminKey) in the StorageClass's controller-publish Secret "+
		"(csi.storage.k8s.io/controller-publish-secret-name and -namespace; docs/shared-pools-cephfs.md)", node, c.Kind, c.ID)
}
