package volume

import "errors"

// StorageClient is a node's client of a shared pool's filesystem, as the
// node recorded it when it staged a volume: the identity the
// filesystem's cluster knows it by, which a controller with the
// cluster's credentials can cut off (a CephFS client's eviction).
type StorageClient struct {
	// Kind is the filesystem's kind (internal/sharedfs: "cephfs").
	Kind string
	// ID is the client's identity there (CephFS: its global ID, 4127).
	ID uint64
	// Cluster is the cluster the client belongs to (CephFS: its fsid).
	Cluster string
}

// FenceRequest asks a kind to cut a node's client off the pool's storage,
// so that the node's device lets go of the volume's image and nothing the
// node still has reaches it: ControllerUnpublishVolume's force-detach of a
// node whose device still holds the image, or ControllerPublishVolume's
// attach refused for such a node. Secrets are that call's (the
// StorageClass's controller-publish Secret).
type FenceRequest struct {
	// Call is the CSI call that asks, for messages.
	Call     string
	VolumeID string
	// Node is the node fenced; Client its client as it recorded it.
	Node    string
	Client  StorageClient
	Secrets Secrets
}

// ErrNoFenceCredentials: the request carries none of the credentials the
// kind needs to fence (the Secret is not set): the caller goes on as
// without a fence, and says what credentials would do.
var ErrNoFenceCredentials = errors.New("no credentials to fence a node's client in the request's secrets")
