package kubectlplugin

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// checkDownNodes names the volumes whose node is NotReady, and the claims
// pinned to it: a filevol volume lives in its node's pool and cannot move, so
// until that node is back no pod can use it, on that node or any other.
func checkDownNodes(c *cluster) []Finding {
	var out []Finding
	for i := range c.pvs {
		pv := &c.pvs[i]
		node := c.nodeOf(pv)
		n, known := c.nodes[node] // gone nodes are checkGoneNodes'; unreadable ones, nobody's
		if pv.DeletionTimestamp != nil || node == "" || !known || nodeReady(n) {
			continue
		}
		claim := "no claim"
		var waiting []string
		if r := pv.Spec.ClaimRef; r != nil {
			claim = "claim " + r.Namespace + "/" + r.Name + " is pinned to it"
			for _, p := range c.claimPods(pv) {
				waiting = append(waiting, p.Namespace+"/"+p.Name)
			}
		}
		cause := fmt.Sprintf("node %s is NotReady (%s): its kubelet and filevol do not answer, and the volume lives in that node's pool, which no other node can reach; a node-local volume cannot move", node, notReadyReason(n))
		if len(waiting) > 0 {
			cause += fmt.Sprintf("; pods %s wait for it", strings.Join(waiting, ", "))
		}
		out = append(out, Finding{Severity: SevError, Kind: "PersistentVolume", Name: pv.Name, pv: pv.Name,
			Problem: fmt.Sprintf("unreachable: its node %s is NotReady (%s)", node, claim),
			Cause:   cause,
			Fix:     fmt.Sprintf("bring node %s back: the volume and its data come back with it, and its pods run again there", node)})
	}
	return out
}

// readyCondition is the node's Ready condition, if it has one.
func readyCondition(n corev1.Node) (corev1.NodeCondition, bool) {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond, true
		}
	}
	return corev1.NodeCondition{}, false
}

func nodeReady(n corev1.Node) bool {
	cond, ok := readyCondition(n)
	return ok && cond.Status == corev1.ConditionTrue
}

// notReadyReason is the Ready condition's reason, as the node controller set it
// ("NodeStatusUnknown": the kubelet stopped posting status).
func notReadyReason(n corev1.Node) string {
	if cond, ok := readyCondition(n); ok && cond.Reason != "" {
		return cond.Reason
	}
	return "no Ready condition"
}
