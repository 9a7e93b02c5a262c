package kubectlplugin

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// componentNode is the label value the chart gives the node DaemonSet's
// pods (app.kubernetes.io/component), which serve NodeStage/NodeUnstage.
const componentNode = "node"

// detachBlocked explains a VolumeAttachment that no pod needs any more and
// that is still there: the attach/detach controller detaches a volume only
// once kubelet on its node has unmounted it (the node's
// status.volumesInUse no longer lists it), and kubelet unmounts through the
// driver's node plugin. With the node plugin gone (not registered in the
// node's CSINode) nothing moves until it is back, or until the node is
// declared out of service. ok is false when neither holds.
func (c *cluster) detachBlocked(pv *corev1.PersistentVolume, va storagev1.VolumeAttachment) (cause, fix string, ok bool) {
	node := va.Spec.NodeName
	n, known := c.nodes[node]
	inUse := known && pv.Spec.CSI != nil &&
		slices.Contains(n.Status.VolumesInUse, corev1.UniqueVolumeName("kubernetes.io/csi/"+c.driver+"^"+pv.Spec.CSI.VolumeHandle))
	registered := c.registeredOn(node)
	if registered && !inUse {
		return "", "", false
	}
	state := vaState(va)
	outOfService := fmt.Sprintf("if node %s is gone for good (not merely its driver), kubectl taint node %s node.kubernetes.io/out-of-service=nodeshutdown:NoExecute: Kubernetes detaches its volumes at once", node, node)
	if registered {
		return fmt.Sprintf("VolumeAttachment %s still attaches it to node %s (%s): no pod uses it, but kubelet on %s still lists it in use (node status volumesInUse), so it has not unmounted it, and the attach/detach controller detaches only what kubelet unmounted",
				va.Name, node, state, node),
			fmt.Sprintf("read kubelet's log on node %s and the log of %s's node plugin there for the failing NodeUnpublishVolume or NodeUnstageVolume; once it succeeds the volume is detached; %s", node, c.driver, outOfService),
			true
	}
	why := fmt.Sprintf("%s's node plugin is not registered on node %s (CSINode %s does not list it), so kubelet there cannot unmount it", c.driver, node, node)
	if inUse {
		why += ", and still lists it in use (node status volumesInUse)"
	}
	return fmt.Sprintf("VolumeAttachment %s still attaches it to node %s (%s): no pod uses it, but %s; the attach/detach controller detaches a volume only once kubelet has unmounted it",
			va.Name, node, state, why),
		fmt.Sprintf("start %s's node plugin on node %s again (%s); kubelet then unmounts the volume, csi-attacher detaches it (ControllerUnpublishVolume), the finalizer goes and the provisioner deletes the volume; %s",
			c.driver, node, c.nodePluginState(node), outOfService),
		true
}

// registeredOn reports whether kubelet on node lists the driver in its
// CSINode (true when CSINodes could not be read: never blame what was not
// seen).
func (c *cluster) registeredOn(node string) bool {
	if len(c.csiNodes) == 0 {
		return true
	}
	cn, ok := c.csiNodes[node]
	return ok && slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == c.driver })
}

// nodePluginState says what became of the driver's node pod on node: none
// there (what keeps the DaemonSet off the node), or its containers' state.
func (c *cluster) nodePluginState(node string) string {
	var states []string
	for _, p := range c.driverPods {
		if p.Spec.NodeName != node || p.Labels["app.kubernetes.io/component"] != componentNode {
			continue
		}
		var bad []string
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready {
				bad = append(bad, containerState(cs))
			}
		}
		s := fmt.Sprintf("pod %s/%s, %s", p.Namespace, p.Name, p.Status.Phase)
		if len(bad) > 0 {
			s += ": " + strings.Join(bad, "; ")
		}
		states = append(states, s)
	}
	if len(states) > 0 {
		return strings.Join(states, "; ")
	}
	if len(c.driverPods) == 0 {
		return "its pod, or the host process with --registration-dir"
	}
	return fmt.Sprintf("no node pod of the driver runs there: check the DaemonSet's nodeSelector, affinity and tolerations against node %s", node)
}
