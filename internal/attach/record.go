package attach

import (
	"fmt"
	"time"

	"github.com/filevol/filevol/internal/inuse"
)

// Attachment is one node's attachment of a volume.
type Attachment struct {
	Node     string `json:"node"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// SingleNode: the access mode allows this node alone (SINGLE_NODE_*).
	SingleNode bool      `json:"singleNode,omitempty"`
	Epoch      uint64    `json:"epoch"`
	Since      time.Time `json:"since"`
	// Client is the node's client of the pool's filesystem as the node
	// noted it when it was attached (CephFS), for a controller that fences
	// the node should it go silent: the controller reads it here, in its
	// own file, since a file the node wrote may wait on the node's client
	// (internal/csi/controller_evict.go). Optional: records written
	// before have none.
	Client *inuse.Client `json:"client,omitempty"`
}

// Detachment is the last detach of a node, kept for messages: a refused
// attach says which node had the volume last and when it left.
type Detachment struct {
	Node  string    `json:"node"`
	Epoch uint64    `json:"epoch"`
	At    time.Time `json:"at"`
	// Client is the detached attachment's: another node's attach after a
	// force-detach fences it.
	Client *inuse.Client `json:"client,omitempty"`
}

// Record is a volume's attachments.
type Record struct {
	Version  int    `json:"version"`
	VolumeID string `json:"volumeID"`
	// LastEpoch is the last epoch handed out; the next is LastEpoch+1.
	LastEpoch   uint64       `json:"lastEpoch"`
	Attachments []Attachment `json:"attachments,omitempty"`
	LastDetach  *Detachment  `json:"lastDetach,omitempty"`
}

// Find returns node's attachment.
func (r Record) Find(node string) (Attachment, bool) {
	for _, a := range r.Attachments {
		if a.Node == node {
			return a, true
		}
	}
	return Attachment{}, false
}

// Nodes lists the attached nodes in the record's order.
func (r Record) Nodes() []string {
	out := make([]string, 0, len(r.Attachments))
	for _, a := range r.Attachments {
		out = append(out, a.Node)
	}
	return out
}

// Request is what ControllerPublishVolume asks for.
type Request struct {
	VolumeID   string
	Node       string
	ReadOnly   bool
	SingleNode bool
	// Client is the node's client of the pool's filesystem, when known.
	Client *inuse.Client
}

// ElsewhereError says which node holds a single-node volume.
type ElsewhereError struct {
	VolumeID string
	Node     string
	Since    time.Time
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("volume %s is attached to node %s since %s: %v", e.VolumeID, e.Node, e.Since.Format(time.RFC3339), ErrAttachedElsewhere)
}

// Is makes errors.Is(err, ErrAttachedElsewhere) true.
func (e *ElsewhereError) Is(target error) bool { return target == ErrAttachedElsewhere }
