package kubectlplugin

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const annSelectedNode = "volume.kubernetes.io/selected-node"

// snapshotSizeTrap matches external-provisioner's refusal of a restore
// into a claim smaller than the snapshot's restore size.
var snapshotSizeTrap = regexp.MustCompile(`requested volume size (\d+) is less than the size (\d+) for the source snapshot`)

// checkPendingPVCs explains claims that stay Pending: the provisioner's
// last error, a selected node that is gone or full, a consumer the
// scheduler cannot place, or no provisioner at all.
func checkPendingPVCs(c *cluster) []Finding {
	var out []Finding
	for i := range c.pvcs {
		if f, ok := c.pendingClaim(&c.pvcs[i]); ok {
			out = append(out, f)
		}
	}
	return out
}

// pendingClaim is the finding about a claim of the driver's that stays
// Pending, with the first cause found; ok is false when the claim is not
// one, or waits as it should (no consumer yet, or not for long).
func (c *cluster) pendingClaim(pvc *corev1.PersistentVolumeClaim) (f Finding, ok bool) {
	if pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil || !c.ours(pvc) {
		return Finding{}, false
	}
	waited := c.now.Sub(pvc.CreationTimestamp.Time)
	f = Finding{Severity: SevError, Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name,
		Problem: fmt.Sprintf("Pending for %s (requests %s)", age(waited), quantity(request(pvc)))}
	node := pvc.Annotations[annSelectedNode]
	consumers := c.podsUsing(pvc.Namespace, pvc.Name)
	failed := c.lastEvent("PersistentVolumeClaim", pvc.Namespace, pvc.Name, "ProvisioningFailed")
	switch {
	case node != "" && !c.nodeExists(node):
		f.Cause = fmt.Sprintf("the scheduler chose node %s for it, and node %s no longer exists", node, node)
		f.Fix = fmt.Sprintf("kubectl annotate pvc %s -n %s %s- (the scheduler then picks a node again)", pvc.Name, pvc.Namespace, annSelectedNode)
	case failed != nil:
		msg := oneLine(failed.Message)
		f.Cause = fmt.Sprintf("the provisioner's last event (ProvisioningFailed, %s ago): %s", age(c.now.Sub(eventTime(*failed))), msg)
		f.Fix = fmt.Sprintf("read the message; csi-provisioner's log on node %s says more", orDash(node))
		switch {
		case hasCode(msg, "ResourceExhausted"):
			f.Cause = fmt.Sprintf("node %s's filevol pool cannot hold %s: RESOURCE_EXHAUSTED%s\n%s",
				orDash(node), quantity(request(pvc)), c.capacityNote(node, pvc), f.Cause)
			move := fmt.Sprintf("kubectl annotate pvc %s -n %s %s- so the scheduler picks a node with room", pvc.Name, pvc.Namespace, annSelectedNode)
			// A data mover's pod is velero's: deleting it fails the backup or restore.
			if len(consumers) > 0 && !ownedByDataMover(consumers) {
				move = fmt.Sprintf("delete pod %s so the scheduler picks a node with room (it follows CSIStorageCapacity)", strings.Join(podNames(consumers), ", "))
			}
			f.Fix = fmt.Sprintf("free space in node %s's pool (delete PVCs or VolumeSnapshots that are no longer needed), request less, or %s", orDash(node), move)
		case snapshotSizeTrap.MatchString(msg):
			f.Cause = fmt.Sprintf("the claim requests %s but its source snapshot says it needs %s: external-provisioner refuses to restore a snapshot into a smaller claim. "+
				"Snapshots taken by filevol before it reported the source claim's request as the restore size say the image's size, which the filesystem's minimum "+
				"(xfs 300 MiB, btrfs 128 MiB) can make larger than the claim\n%s",
				quantity(request(pvc)), snapshotSizeTrap.FindStringSubmatch(msg)[2]+" bytes", f.Cause)
			f.Fix = fmt.Sprintf("recreate the claim requesting at least the snapshot's restoreSize (kubectl get volumesnapshot -n %s -o wide), or take a new snapshot of the source with this filevol and restore that", pvc.Namespace)
		case hasCode(msg, "InvalidArgument"):
			f.Fix = fmt.Sprintf("fix the parameters of StorageClass %s (fstype ext4|xfs|btrfs, provisioning thin|thick), then recreate the claim", className(pvc))
		}
	default:
		if blocked := c.unschedulable(consumers); blocked != "" {
			f.Cause = blocked
			f.Fix = "free space on a node, request less, or add nodes with a filevol pool"
			if !strings.Contains(blocked, "storage") {
				f.Fix = "fix what keeps the pod from being scheduled (see its FailedScheduling event)"
			}
			break
		}
		if len(consumers) == 0 || waited < c.grace {
			return Finding{}, false // WaitForFirstConsumer without a consumer yet, or just created
		}
		last := "none"
		if e := c.lastEvent("PersistentVolumeClaim", pvc.Namespace, pvc.Name); e != nil {
			last = e.Reason + ": " + oneLine(e.Message)
		}
		f.Cause = fmt.Sprintf("no provisioner has answered for it (last event: %s)", last)
		f.Fix = fmt.Sprintf("check that csi-provisioner runs for %s on node %s (the csi-provisioner container of the driver pod there, or its host process; --node-deployment needs NODE_NAME) and read its log", c.driver, orDash(node))
	}
	return f, true
}

// unschedulable says why the first unschedulable consumer pod is, or "".
func (c *cluster) unschedulable(pods []corev1.Pod) string {
	for _, p := range pods {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				msg := oneLine(cond.Message)
				if e := c.lastEvent("Pod", p.Namespace, p.Name, "FailedScheduling"); e != nil {
					msg = oneLine(e.Message)
				}
				return fmt.Sprintf("pod %s/%s that uses it cannot be scheduled: %s%s", p.Namespace, p.Name, msg, c.capacityNote("", nil))
			}
		}
	}
	return ""
}

// capacityNote summarises what CSIStorageCapacity says of node (all
// nodes when ""), for the claim's class when pvc is set.
func (c *cluster) capacityNote(node string, pvc *corev1.PersistentVolumeClaim) string {
	var parts []string
	for _, cp := range c.ourCapacities() {
		n := c.capacityNode(cp)
		if (node != "" && n != node) || (pvc != nil && cp.StorageClassName != className(pvc)) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s/%s: %s", n, cp.StorageClassName, quantity(cp.Capacity)))
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return " (CSIStorageCapacity available: " + strings.Join(parts, ", ") + ")"
}

// checkCapacity names nodes that CSIStorageCapacity reports full.
func checkCapacity(c *cluster) []Finding {
	full := map[string][]string{}
	for _, cp := range c.ourCapacities() {
		if cp.Capacity == nil || cp.Capacity.Sign() <= 0 {
			n := c.capacityNode(cp)
			full[n] = append(full[n], cp.StorageClassName)
		}
	}
	var out []Finding
	for _, node := range sortedKeys(full) {
		classes := full[node]
		slices.Sort(classes)
		cause := fmt.Sprintf("CSIStorageCapacity reports 0 bytes available on node %s for StorageClass %s: its pool is full, or --reserved-capacity takes the rest", node, strings.Join(classes, ", "))
		if r := c.views[node]; r != nil {
			cause += fmt.Sprintf("; the driver sees %s free of %s, %s reserved, %s promised to volumes",
				sizeStr(r.Pool.FreeBytes), sizeStr(r.Pool.TotalBytes), sizeStr(r.Pool.ReservedBytes), sizeStr(r.Pool.ProvisionedBytes))
		}
		out = append(out, Finding{Severity: SevWarning, Kind: "Node", Name: node,
			Problem: "no room for new filevol volumes",
			Cause:   cause,
			Fix:     fmt.Sprintf("the scheduler will not place new filevol volumes on %s: delete PVCs or VolumeSnapshots there that are no longer needed, or grow the pool's filesystem", node)})
	}
	return out
}

// ourCapacities are the CSIStorageCapacity objects of the driver's classes.
func (c *cluster) ourCapacities() []storagev1.CSIStorageCapacity {
	var out []storagev1.CSIStorageCapacity
	for _, cp := range c.capacities {
		if sc, ok := c.classes[cp.StorageClassName]; ok && sc.Provisioner == c.driver {
			out = append(out, cp)
		}
	}
	return out
}

func (c *cluster) capacityNode(cp storagev1.CSIStorageCapacity) string {
	if cp.NodeTopology != nil {
		if v, ok := cp.NodeTopology.MatchLabels[TopologyKey]; ok {
			return c.nodeByTopology(v)
		}
		if v, ok := cp.NodeTopology.MatchLabels[corev1.LabelHostname]; ok {
			return v
		}
	}
	return "?"
}

func request(pvc *corev1.PersistentVolumeClaim) *resource.Quantity {
	q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil
	}
	return &q
}

func className(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Spec.StorageClassName == nil {
		return ""
	}
	return *pvc.Spec.StorageClassName
}
