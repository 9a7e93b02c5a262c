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
// VolumeStatus.published_node_ids: filevol has no ControllerPublish, and
// a volume is staged wherever it is published).
func publishedNodes(entries []inuse.Entry) []string {
	if len(entries) == 0 {
		return nil
	}
	return inuse.Nodes(entries)
}
