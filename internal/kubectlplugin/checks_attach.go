package kubectlplugin

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// multiAttach reports kubelet's or the attach/detach controller's word for
// a ReadWriteOnce volume that another node still has: Kubernetes'
// "Multi-Attach error", or filevol's own refusal of ControllerPublishVolume
// ("is attached to node").
func multiAttach(msg string) bool {
	return strings.Contains(msg, "Multi-Attach error") ||
		(hasCode(msg, "FailedPrecondition") && strings.Contains(msg, "is attached to node"))
}

// fenced reports filevol's refusal to attach a volume whose image another
// node's loop device may still write (the fencing lock is held).
func fenced(msg string) bool { return strings.Contains(msg, "still holds the image") }

// fenceHolder is the node filevol's refusal names as the holder of the
// image ("node n3 (detached at ...) still holds the image"), or "".
var fenceHolder = regexp.MustCompile(`node (\S+) (?:\(detached at [^)]*\) )?still holds the image`)

// fencePending and fenceDevice are what filevol's refusal adds from the
// holder's in-use record: a detach of its device that waits for what
// still holds the device open (device, holders, when seen), or only the
// device.
var (
	fencePending = regexp.MustCompile(`loop device (\S+) is detached but its detach is pending, because the device is still held: (.*) \(seen by filevol on node \S+ at ([^)]*)\)`)
	fenceDevice  = regexp.MustCompile(`staged it through its loop device (\S+):`)
)

// fenceFix is the way out of a fencing refusal once no VolumeAttachment
// names the old node any more (force-detached: out-of-service taint, or
// deleted by hand): only that node's loop device keeps the volume. When
// the refusal names the device, and what holds it open after a detach
// that only marked it, the fix says so instead of advising losetup -d.
func fenceFix(msg, node string) string {
	holder := "the node that had the volume"
	if m := fenceHolder.FindStringSubmatch(msg); m != nil {
		holder = "node " + m[1]
	}
	device, restart := "", fmt.Sprintf("start filevol (its node pod) and kubelet on %[1]s again, so that kubelet unmounts the volume and filevol unstages it "+
		"(with the out-of-service taint on it, remove the taint once %[1]s is back, or the DaemonSet does not run filevol there)", holder)
	detach := fmt.Sprintf("if %[1]s can write no more (powered off, cut off from the pool's storage) detach its loop device there (losetup -d)", holder)
	if m := fencePending.FindStringSubmatch(msg); m != nil {
		device = " (its device there is " + m[1] + ")"
		return fmt.Sprintf("the volume is already detached from %[1]s in Kubernetes, but %[1]s's loop device still holds the image%[2]s: "+
			"its detach (losetup -d) is pending, because the device is still held: %[3]s (seen by filevol on %[1]s at %[4]s), and the kernel lets go only at its last close, "+
			"so losetup -d again changes nothing; end those holders: %[5]s, or on %[1]s unmount it and stop the processes by hand; "+
			"Kubernetes then attaches the volume to node %[6]s at its next retry", holder, device, m[2], m[3], restart, node)
	}
	if m := fenceDevice.FindStringSubmatch(msg); m != nil {
		dev := m[1]
		device = " (its device there is " + dev + ")"
		detach = fmt.Sprintf("if %[1]s can write no more (powered off, cut off from the pool's storage) detach %[2]s there (losetup -d %[2]s); "+
			"if it was detached already and stays (losetup -l shows it with AUTOCLEAR 1), something still holds it open: find it on %[1]s with findmnt -S %[2]s, fuser -vm %[2]s or lsof %[2]s, and end it",
			holder, dev)
	}
	return fmt.Sprintf("the volume is already detached from %[1]s in Kubernetes, but %[1]s's loop device still holds the image%[2]s: %[3]s; %[4]s; "+
		"Kubernetes then attaches the volume to node %[5]s at its next retry", holder, device, restart, detach, node)
}

// attachCauses explains why pv cannot be attached to node: which other
// node holds it, whether a pod there still uses it, and the way out,
// including for a node that is gone or down (force-detach).
func (c *cluster) attachCauses(pv *corev1.PersistentVolume, node string) (cause, fix string) {
	var causes, fixes []string
	for _, va := range c.attachmentsOf(pv.Name) {
		other := va.Spec.NodeName
		if other == node {
			continue
		}
		state := vaState(va)
		switch pods := c.runningOn(c.claimPods(pv), other); {
		case !c.nodeExists(other):
			causes = append(causes, fmt.Sprintf("VolumeAttachment %s attaches %s to node %s (%s), and node %s no longer exists", va.Name, pv.Name, other, state, other))
			fixes = append(fixes, fmt.Sprintf("kubectl delete volumeattachment %s: the csi-attacher detaches it, and the pod's node attaches it", va.Name))
		case len(pods) > 0:
			causes = append(causes, fmt.Sprintf("the volume is ReadWriteOnce and VolumeAttachment %s attaches it to node %s (%s), where pod %s still uses it",
				va.Name, other, state, strings.Join(pods, ", ")))
			fixes = append(fixes, fmt.Sprintf("a ReadWriteOnce volume follows its pod once the old pod is gone: delete pod %s on node %s (or scale its owner down) first", strings.Join(pods, ", "), other))
		case strings.HasPrefix(c.nodeStatus(other), "NotReady"):
			causes = append(causes, fmt.Sprintf("VolumeAttachment %s attaches %s to node %s (%s), which is NotReady: kubelet there cannot confirm the unmount, so Kubernetes waits 6 minutes before it force-detaches",
				va.Name, pv.Name, other, state))
			fixes = append(fixes, fmt.Sprintf("if node %s is really down (powered off, not merely cut off), kubectl taint node %s node.kubernetes.io/out-of-service=nodeshutdown:NoExecute: the volume is detached at once; filevol still refuses the new attach for as long as node %s's loop device holds the image", other, other, other))
		default:
			causes = append(causes, fmt.Sprintf("VolumeAttachment %s attaches %s to node %s (%s); no pod uses it there any more, so the csi-attacher should detach it", va.Name, pv.Name, other, state))
			fixes = append(fixes, fmt.Sprintf("read the csi-attacher's log for %s and kubelet's on node %s (an unmount that fails keeps it attached)", va.Name, other))
		}
	}
	if len(causes) == 0 {
		return "", ""
	}
	return strings.Join(causes, "\n"), strings.Join(fixes, "\n")
}
