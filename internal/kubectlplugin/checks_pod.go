package kubectlplugin

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// volumeEventReasons are kubelet's events about a pod's volumes.
var volumeEventReasons = []string{"FailedMount", "FailedMapVolume", "FailedAttachVolume"}

// stuckPod is a pod waiting in ContainerCreating on a filevol volume.
type stuckPod struct {
	pod    *corev1.Pod
	claims []string
	pvs    []*corev1.PersistentVolume
	event  *corev1.Event
}

// stuckPods finds pods created longer than c.grace ago whose
// containers are still being created, that use a filevol claim and that
// kubelet has a volume event about.
func (c *cluster) stuckPods() []stuckPod {
	var out []stuckPod
	for i := range c.pods {
		p := &c.pods[i]
		if p.Status.Phase != corev1.PodPending || p.Spec.NodeName == "" || p.DeletionTimestamp != nil || !creating(p) {
			continue
		}
		if c.now.Sub(p.CreationTimestamp.Time) < c.grace {
			continue
		}
		s := stuckPod{pod: p, event: c.lastEvent("Pod", p.Namespace, p.Name, volumeEventReasons...)}
		for _, v := range p.Spec.Volumes {
			name := ""
			switch {
			case v.PersistentVolumeClaim != nil:
				name = v.PersistentVolumeClaim.ClaimName
			case v.Ephemeral != nil:
				name = p.Name + "-" + v.Name
			default:
				continue
			}
			if pvc := c.pvc(p.Namespace, name); pvc != nil && c.ours(pvc) {
				s.claims = append(s.claims, name)
				if pv := c.pv(pvc.Spec.VolumeName); pv != nil {
					s.pvs = append(s.pvs, pv)
				}
			}
		}
		if len(s.claims) > 0 && s.event != nil {
			out = append(out, s)
		}
	}
	return out
}

// creating reports a pod whose containers wait in ContainerCreating (or
// have no status yet).
func creating(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason == "ContainerCreating" {
			return true
		}
	}
	return false
}

// checkStuckPods explains pods stuck in ContainerCreating on a filevol
// volume from kubelet's last volume event and the driver's own view.
func checkStuckPods(c *cluster) []Finding {
	var out []Finding
	for _, s := range c.stuckPods() {
		p, node := s.pod, s.pod.Spec.NodeName
		msg := oneLine(s.event.Message)
		cause := fmt.Sprintf("kubelet on node %s (%s, %s ago): %s", node, s.event.Reason, age(c.now.Sub(eventTime(*s.event))), msg)
		fix := fmt.Sprintf("kubectl filevol describe pvc/%s -n %s shows the whole chain; the driver's log on node %s says more", s.claims[0], p.Namespace, node)
		switch {
		case strings.Contains(msg, "image file") && strings.Contains(msg, "missing"):
			cause = "the volume's image file is gone from node " + node + "'s pool (removed by hand, or lost with the disk)\n" + cause
			fix = "the data cannot be mounted: restore a VolumeSnapshot into a new PVC and point the pod at it, or delete the PVC (and its PV) to start empty; if the file was only moved, put it back (check the pool's quarantine directory)"
		case strings.Contains(msg, "not found in the list of registered CSI drivers"):
			cause = "filevol is not registered with kubelet on node " + node + ": the driver is not running there\n" + cause
			fix = "start the filevol driver on node " + node + " (its pod, or the host process with --registration-dir) and read its log"
		case (multiAttach(msg) || fenced(msg)) && len(s.pvs) > 0:
			why, how := c.attachCauses(s.pvs[0], node)
			if why != "" {
				cause, fix = why+"\n"+cause, how
			}
			if fenced(msg) {
				cause = "filevol refuses the attach: another node's loop device still holds the image and could write to it (fencing)\n" + cause
				if why == "" {
					fix = fenceFix(msg, node)
				}
			}
		case secretTrouble(msg):
			cause, fix = secretCause(s.pvs, msg, cause)
		case hasCode(msg, "ResourceExhausted"):
			cause = "node " + node + " ran out of loop devices or pool space\n" + cause
			fix = "free loop devices or pool space on node " + node
		}
		for _, pv := range s.pvs {
			if v := c.viewVolume(node, pv.Spec.CSI.VolumeHandle); v != nil {
				for _, h := range v.Health {
					cause += fmt.Sprintf("\nthe driver on %s reports %s: %s (%s)", node, pv.Name, h.Reason, oneLine(h.Message))
				}
			}
		}
		pv := ""
		if len(s.pvs) > 0 {
			pv = s.pvs[0].Name
		}
		out = append(out, Finding{Severity: SevError, Kind: "Pod", Namespace: p.Namespace, Name: p.Name, pv: pv,
			Problem: fmt.Sprintf("stuck in ContainerCreating for %s on node %s, waiting for volume %s", age(c.now.Sub(p.CreationTimestamp.Time)), node, strings.Join(s.claims, ", ")),
			Cause:   cause, Fix: fix})
	}
	return out
}
