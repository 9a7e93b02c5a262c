package csi

import (
	"strings"

	"github.com/filevol/filevol/internal/inuse"
)

// describeInUse says where a volume is staged, for FAILED_PRECONDITION
// messages: "staged on node n1 at /var/lib/kubelet/...".
func describeInUse(entries []inuse.Entry) string {
	var parts []string
	for _, e := range entries {
		how := "staged"
		if e.Block {
			how = "staged as a block device"
		}
		parts = append(parts, how+" on node "+e.Node+" at "+e.StagingPath)
	}
	return strings.Join(parts, ", ")
}

// publishedNodes lists the nodes where the volume is staged (CSI
// VolumeStatus.published_node_ids: a node-local volume has no
// ControllerPublish, and is staged wherever it is published).
func publishedNodes(entries []inuse.Entry) []string {
	if len(entries) == 0 {
		return nil
	}
	return inuse.Nodes(entries)
}

// publishedOf lists the nodes a volume is published to: on a shared pool
// the nodes ControllerPublishVolume attached it to, else where it is
// staged (staged: the pool's in-use records of it).
func (s *ControllerService) publishedOf(st *poolStore, id string, staged []inuse.Entry) ([]string, error) {
	if !s.cfg.Shared {
		return publishedNodes(staged), nil
	}
	rec, err := st.attach.Of(id)
	if err != nil || len(rec.Attachments) == 0 {
		return nil, err
	}
	return rec.Nodes(), nil
}
