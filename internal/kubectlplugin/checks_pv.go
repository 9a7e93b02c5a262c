package kubectlplugin

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

const (
	finalizerPVProtection  = "kubernetes.io/pv-protection"
	finalizerPVCProtection = "kubernetes.io/pvc-protection"
	finalizerProvisioner   = "external-provisioner.volume.kubernetes.io/finalizer"
	finalizerAttacherPfx   = "external-attacher/"
)

// checkTerminatingPVs names what holds each PV stuck in Terminating: its
// finalizers, and behind them the VolumeAttachments, claims, pods and
// nodes that keep each one in place.
func checkTerminatingPVs(c *cluster) []Finding {
	var out []Finding
	for i := range c.pvs {
		pv := &c.pvs[i]
		if pv.DeletionTimestamp == nil || len(pv.Finalizers) == 0 {
			continue
		}
		var causes, fixes []string
		add := func(cause, fix string) { causes, fixes = append(causes, cause), append(fixes, fix) }
		for idx, f := range pv.Finalizers {
			removeFinalizer := fmt.Sprintf(`kubectl patch pv %s --type=json -p '[{"op":"remove","path":"/metadata/finalizers/%d"}]'`, pv.Name, idx)
			switch {
			case strings.HasPrefix(f, finalizerAttacherPfx):
				c.attacherCauses(pv, f, removeFinalizer, add)
			case f == finalizerPVProtection:
				c.protectionCauses(pv, add)
			case f == finalizerProvisioner:
				c.provisionerCauses(pv, removeFinalizer, add)
			default:
				add(fmt.Sprintf("finalizer %s, which filevol does not know, is still set", f),
					fmt.Sprintf("find the controller that owns %s; once it is sure, %s", f, removeFinalizer))
			}
		}
		out = append(out, Finding{Severity: SevError, Kind: "PersistentVolume", Name: pv.Name, pv: pv.Name,
			Problem: fmt.Sprintf("stuck Terminating for %s, held by finalizers %s",
				age(c.now.Sub(pv.DeletionTimestamp.Time)), strings.Join(pv.Finalizers, ", ")),
			Cause: strings.Join(causes, "\n"), Fix: strings.Join(fixes, "\n")})
	}
	return out
}

// attacherCauses explains an external-attacher finalizer: it stays while
// a VolumeAttachment of the PV exists.
func (c *cluster) attacherCauses(pv *corev1.PersistentVolume, f, removeFinalizer string, add func(string, string)) {
	noAttacher := c.csiDriver != nil && c.csiDriver.Spec.AttachRequired != nil && !*c.csiDriver.Spec.AttachRequired
	vas := c.attachmentsOf(pv.Name)
	if len(vas) == 0 {
		cause := fmt.Sprintf("finalizer %s is left although no VolumeAttachment refers to the PV any more: the csi-attacher that owns it is not running", f)
		if noAttacher {
			cause += fmt.Sprintf(" (CSIDriver %s has attachRequired: false, so none is deployed)", c.driver)
		}
		add(cause, removeFinalizer)
		return
	}
	for _, va := range vas {
		node := va.Spec.NodeName
		clearVA := fmt.Sprintf(`kubectl patch volumeattachment %s --type=merge -p '{"metadata":{"finalizers":null}}'`, va.Name)
		deleteVA := "kubectl delete volumeattachment " + va.Name + " --wait=false"
		state := vaState(va)
		if !c.nodeExists(node) {
			add(fmt.Sprintf("VolumeAttachment %s still attaches it to node %s (%s), and node %s no longer exists: nothing will ever detach it", va.Name, node, state, node),
				fmt.Sprintf("%s; %s; then, if the attacher is gone too, %s", deleteVA, clearVA, removeFinalizer))
			continue
		}
		if pods := c.runningOn(c.claimPods(pv), node); len(pods) > 0 {
			add(fmt.Sprintf("VolumeAttachment %s still attaches it to node %s (%s) because pod %s uses it there", va.Name, node, state, strings.Join(pods, ", ")),
				fmt.Sprintf("delete pod %s first (and what recreates it); kubelet unmounts it and the attachment goes", strings.Join(pods, ", ")))
			continue
		}
		if cause, fix, ok := c.detachBlocked(pv, va); ok {
			add(cause, fix)
			continue
		}
		cause := fmt.Sprintf("VolumeAttachment %s still attaches it to node %s (%s); no pod uses it there any more", va.Name, node, state)
		fix := fmt.Sprintf("check the csi-attacher's log for %s", va.Name)
		if noAttacher {
			cause += fmt.Sprintf("; CSIDriver %s has attachRequired: false, so no csi-attacher will ever detach it", c.driver)
			fix = fmt.Sprintf("%s; %s; then %s", deleteVA, clearVA, removeFinalizer)
		}
		add(cause, fix)
	}
}

func vaState(va storagev1.VolumeAttachment) string {
	s := fmt.Sprintf("attached: %v", va.Status.Attached)
	if va.DeletionTimestamp != nil {
		s += ", being deleted"
	}
	if e := va.Status.DetachError; e != nil {
		s += ", detach error: " + oneLine(e.Message)
	}
	if e := va.Status.AttachError; e != nil {
		s += ", attach error: " + oneLine(e.Message)
	}
	return s
}

// protectionCauses explains kubernetes.io/pv-protection: it stays while
// the PV is bound.
func (c *cluster) protectionCauses(pv *corev1.PersistentVolume, add func(string, string)) {
	if pv.Status.Phase != corev1.VolumeBound || pv.Spec.ClaimRef == nil {
		return // the PV protection controller removes it shortly
	}
	ref := pv.Spec.ClaimRef
	claim := c.claimOf(pv)
	if claim == nil {
		add(fmt.Sprintf("%s: the PV is still Bound to PVC %s/%s, which no longer exists", finalizerPVProtection, ref.Namespace, ref.Name),
			"check that kube-controller-manager runs (it releases PVs whose claim is gone)")
		return
	}
	pods := podNames(c.podsUsing(claim.Namespace, claim.Name))
	cause := fmt.Sprintf("%s: the PV is still Bound to PVC %s/%s", finalizerPVProtection, claim.Namespace, claim.Name)
	fix := fmt.Sprintf("delete the claim first: kubectl delete pvc %s -n %s", claim.Name, claim.Namespace)
	if len(pods) > 0 {
		cause += ", which pod " + strings.Join(pods, ", ") + " uses"
		fix = fmt.Sprintf("delete pod %s, then the claim: kubectl delete pvc %s -n %s", strings.Join(pods, ", "), claim.Name, claim.Namespace)
	}
	add(cause, fix)
}

// provisionerCauses explains the provisioner's finalizer: it stays until
// DeleteVolume succeeded on the volume's node.
func (c *cluster) provisionerCauses(pv *corev1.PersistentVolume, removeFinalizer string, add func(string, string)) {
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return
	}
	node := c.nodeOf(pv)
	if node != "" && !c.nodeExists(node) {
		add(fmt.Sprintf("%s: the volume lives in node %s's pool and node %s no longer exists, so no provisioner can delete it", finalizerProvisioner, node, node),
			fmt.Sprintf("the image file went with the node; %s", removeFinalizer))
		return
	}
	if e := c.lastEvent("PersistentVolume", "", pv.Name, "VolumeFailedDelete"); e != nil {
		msg := oneLine(e.Message)
		cause := fmt.Sprintf("%s: the provisioner could not delete the volume (%s ago): %s", finalizerProvisioner, age(c.now.Sub(eventTime(*e))), msg)
		fix := fmt.Sprintf("see csi-provisioner's log on node %s", orDash(node))
		if strings.Contains(msg, "is still attached to node") {
			// csi-provisioner refuses to delete a volume a VolumeAttachment still holds.
			fix = "the provisioner deletes the volume once it is detached: see what keeps its VolumeAttachment"
		} else if hasCode(msg, "FailedPrecondition") {
			fix = fmt.Sprintf("the volume is still staged or mounted on node %s: kubectl filevol describe pv/%s shows where; delete the pods that use it, or let kubelet unstage it, and the provisioner retries", orDash(node), pv.Name)
		}
		add(cause, fix)
		return
	}
	add(fmt.Sprintf("%s: waiting for the provisioner on node %s to delete the volume (no VolumeFailedDelete event)", finalizerProvisioner, orDash(node)),
		fmt.Sprintf("check that csi-provisioner runs on node %s", orDash(node)))
}

// checkReleasedPVs names PVs whose claim is gone, whose reclaim policy
// says Delete, and that nobody deleted: the provisioner of their node is
// not doing its job.
func checkReleasedPVs(c *cluster) []Finding {
	var out []Finding
	for i := range c.pvs {
		pv := &c.pvs[i]
		if pv.Status.Phase != corev1.VolumeReleased || pv.DeletionTimestamp != nil ||
			pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			continue
		}
		since := pv.Status.LastPhaseTransitionTime
		if since == nil || c.now.Sub(since.Time) < c.grace {
			continue
		}
		node := c.nodeOf(pv)
		f := Finding{Severity: SevWarning, Kind: "PersistentVolume", Name: pv.Name, pv: pv.Name,
			Problem: fmt.Sprintf("Released for %s and not deleted (reclaim policy Delete)", age(c.now.Sub(since.Time))),
			Cause:   fmt.Sprintf("no provisioner has deleted it: csi-provisioner for node %s is not running, or fails (no VolumeFailedDelete event)", orDash(node)),
			Fix:     fmt.Sprintf("check that csi-provisioner runs for %s on node %s; it deletes the volume and the PV", c.driver, orDash(node))}
		if !c.nodeExists(node) {
			continue // checkGoneNodes tells
		}
		if e := c.lastEvent("PersistentVolume", "", pv.Name, "VolumeFailedDelete"); e != nil {
			f.Severity = SevError
			f.Cause = fmt.Sprintf("the provisioner could not delete the volume (%s ago): %s", age(c.now.Sub(eventTime(*e))), oneLine(e.Message))
			if hasCode(e.Message, "FailedPrecondition") {
				f.Fix = fmt.Sprintf("the volume is still staged or mounted on node %s: kubectl filevol describe pv/%s shows where; once nothing uses it the provisioner retries", orDash(node), pv.Name)
			}
		}
		out = append(out, f)
	}
	return out
}

// checkTerminatingPVCs names the pods that keep a deleted claim (pvc-protection).
func checkTerminatingPVCs(c *cluster) []Finding {
	var out []Finding
	for i := range c.pvcs {
		pvc := &c.pvcs[i]
		if pvc.DeletionTimestamp == nil || !c.ours(pvc) || !slices.Contains(pvc.Finalizers, finalizerPVCProtection) {
			continue
		}
		pods := podNames(c.podsUsing(pvc.Namespace, pvc.Name))
		if len(pods) == 0 {
			continue
		}
		out = append(out, Finding{Severity: SevError, Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, pv: pvc.Spec.VolumeName,
			Problem: fmt.Sprintf("stuck Terminating for %s", age(c.now.Sub(pvc.DeletionTimestamp.Time))),
			Cause:   fmt.Sprintf("%s: pod %s still uses it", finalizerPVCProtection, strings.Join(pods, ", ")),
			Fix:     fmt.Sprintf("delete pod %s (and what recreates it); the claim goes when no pod uses it", strings.Join(pods, ", "))})
	}
	return out
}

// checkGoneNodes names volumes whose node no longer exists.
func checkGoneNodes(c *cluster) []Finding {
	var out []Finding
	for i := range c.pvs {
		pv := &c.pvs[i]
		node := c.nodeOf(pv)
		if pv.DeletionTimestamp != nil || node == "" || c.nodeExists(node) {
			continue
		}
		claim := "no claim"
		fix := fmt.Sprintf("bring node %s back (same --node-id), or delete the PV", node)
		if r := pv.Spec.ClaimRef; r != nil {
			claim = "claim " + r.Namespace + "/" + r.Name
			fix = fmt.Sprintf("bring node %s back (same --node-id) and the volume comes back with it; or give up its data: kubectl delete pvc %s -n %s, then remove the PV's finalizers (no provisioner runs on %s to delete it)", node, r.Name, r.Namespace, node)
		}
		out = append(out, Finding{Severity: SevError, Kind: "PersistentVolume", Name: pv.Name, pv: pv.Name,
			Problem: fmt.Sprintf("its node %s no longer exists (%s)", node, claim),
			Cause:   fmt.Sprintf("filevol volumes live in one node's pool; node %s is gone, so no pod can use this volume anywhere", node),
			Fix:     fix})
	}
	return out
}

// claimPods are the pods using pv's claim.
func (c *cluster) claimPods(pv *corev1.PersistentVolume) []corev1.Pod {
	if pv.Spec.ClaimRef == nil {
		return nil
	}
	return c.podsUsing(pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
}

// runningOn names the pods scheduled on node.
func (c *cluster) runningOn(pods []corev1.Pod, node string) []string {
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName == node {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// hasCode reports whether a CSI error message carries the gRPC code, in
// either spelling (ResourceExhausted, RESOURCE_EXHAUSTED).
func hasCode(msg, code string) bool {
	norm := strings.ToLower(strings.ReplaceAll(msg, "_", ""))
	return strings.Contains(norm, strings.ToLower(code))
}
