package kubectlplugin

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Reasons of the events the driver emits (internal/monitor).
const (
	reasonVolumeAbnormal    = "VolumeConditionAbnormal"
	reasonVolumeNormal      = "VolumeConditionNormal"
	reasonOrphanQuarantined = "OrphanQuarantined"
	reasonPoolNearlyFull    = "PoolNearlyFull"
	reasonPoolSpaceOK       = "PoolSpaceRecovered"
)

// checkDriver: the CSIDriver object, the driver's pods and sidecars, and
// its registration with kubelet on every node that needs it.
func checkDriver(c *cluster) []Finding {
	var out []Finding
	if c.csiDriver == nil {
		out = append(out, Finding{Severity: SevError, Kind: "CSIDriver", Name: c.driver,
			Problem: "not found",
			Cause:   fmt.Sprintf("no CSIDriver object named %s: filevol is not installed, or under another name", c.driver),
			Fix:     "install filevol (charts/filevol), or pass --driver with the name it was installed under"})
	}
	for _, p := range c.driverPods {
		var bad []string
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if cs.Ready || (cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0) {
				continue
			}
			bad = append(bad, containerState(cs))
		}
		if p.Status.Phase == corev1.PodRunning && len(bad) == 0 {
			continue
		}
		if len(bad) == 0 {
			bad = append(bad, "pod phase "+string(p.Status.Phase)+" "+oneLine(p.Status.Message))
		}
		out = append(out, Finding{Severity: SevError, Kind: "Pod", Namespace: p.Namespace, Name: p.Name,
			Problem: fmt.Sprintf("driver pod not ready on node %s", orDash(p.Spec.NodeName)),
			Cause:   strings.Join(bad, "\n"),
			Fix:     fmt.Sprintf("kubectl logs -n %s %s -c <container> --previous; volumes on node %s cannot be created, mounted or deleted meanwhile", p.Namespace, p.Name, orDash(p.Spec.NodeName))})
	}
	for _, node := range c.nodesNeedingDriver() {
		if !c.nodeExists(node) {
			continue // checkGoneNodes
		}
		cn, ok := c.csiNodes[node]
		if !ok && len(c.csiNodes) == 0 {
			continue // CSINodes not readable
		}
		if slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == c.driver }) {
			continue
		}
		out = append(out, Finding{Severity: SevError, Kind: "Node", Name: node,
			Problem: fmt.Sprintf("%s is not registered with kubelet", c.driver),
			Cause:   fmt.Sprintf("CSINode %s does not list %s, yet filevol volumes or pods that use them are on this node: kubelet cannot stage, mount or unmount them", node, c.driver),
			Fix:     fmt.Sprintf("start the filevol driver on node %s (its pod, or the host process with --registration-dir); it registers itself with kubelet", node)})
	}
	return out
}

func containerState(cs corev1.ContainerStatus) string {
	s := "container " + cs.Name + ": not ready"
	switch {
	case cs.State.Waiting != nil:
		s = fmt.Sprintf("container %s: waiting, %s", cs.Name, cs.State.Waiting.Reason)
		if m := oneLine(cs.State.Waiting.Message); m != "" {
			s += " (" + m + ")"
		}
	case cs.State.Terminated != nil:
		s = fmt.Sprintf("container %s: terminated, %s (exit code %d)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
	}
	if cs.RestartCount > 0 {
		s += fmt.Sprintf(", restarted %d times", cs.RestartCount)
		if t := cs.LastTerminationState.Terminated; t != nil {
			s += fmt.Sprintf(", last exit: %s (code %d)", t.Reason, t.ExitCode)
		}
	}
	return s
}

// nodesNeedingDriver are the nodes holding filevol volumes, running pods
// that use them, or having them attached (a VolumeAttachment: kubelet there
// must unmount the volume before it can be detached).
func (c *cluster) nodesNeedingDriver() []string {
	set := map[string]bool{}
	for _, va := range c.vas {
		set[va.Spec.NodeName] = true
	}
	for i := range c.pvs {
		if n := c.nodeOf(&c.pvs[i]); n != "" {
			set[n] = true
		}
		for _, p := range c.claimPods(&c.pvs[i]) {
			if p.Spec.NodeName != "" {
				set[p.Spec.NodeName] = true
			}
		}
	}
	return sortedKeys(set)
}

// nodesToAsk are the existing nodes whose driver view matters: those
// holding filevol volumes or their pods, those CSIStorageCapacity calls
// full, those the driver sent events about.
func (c *cluster) nodesToAsk() []string {
	set := map[string]bool{}
	for _, n := range c.nodesNeedingDriver() {
		set[n] = true
	}
	for _, cp := range c.ourCapacities() {
		set[c.capacityNode(cp)] = true
	}
	for _, e := range c.events {
		if e.InvolvedObject.Kind == "Node" && e.Source.Component == "filevol" {
			set[e.InvolvedObject.Name] = true
		}
	}
	var out []string
	for _, n := range sortedKeys(set) {
		if _, ok := c.nodes[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// checkDriverReports turns what the driver said — its node-side view when
// reachable, else its Events — into findings: abnormal volume health,
// orphaned images in quarantine, a pool nearly full.
func checkDriverReports(c *cluster) []Finding {
	var out []Finding
	stuck := map[string]bool{}
	for _, s := range c.stuckPods() {
		for _, pv := range s.pvs {
			stuck[pv.Name] = true // checkStuckPods already tells
		}
	}
	for i := range c.pvs {
		pv := &c.pvs[i]
		if stuck[pv.Name] {
			continue
		}
		node := c.nodeOf(pv)
		var causes []string
		if v := c.viewVolume(node, pv.Spec.CSI.VolumeHandle); v != nil {
			for _, h := range v.Health {
				causes = append(causes, fmt.Sprintf("%s (%s): %s", h.Reason, h.Status, oneLine(h.Message)))
			}
		} else if c.views[node] == nil {
			e := c.lastEvent("PersistentVolume", "", pv.Name, reasonVolumeAbnormal, reasonVolumeNormal)
			if e != nil && e.Reason == reasonVolumeAbnormal {
				causes = append(causes, fmt.Sprintf("the driver's event (%s ago): %s", age(c.now.Sub(eventTime(*e))), oneLine(e.Message)))
			}
		}
		if len(causes) == 0 {
			continue
		}
		out = append(out, Finding{Severity: SevError, Kind: "PersistentVolume", Name: pv.Name, pv: pv.Name,
			Problem: fmt.Sprintf("the driver on node %s reports the volume abnormal", orDash(node)),
			Cause:   strings.Join(causes, "\n"), Fix: healthFix(strings.Join(causes, " "), node)})
	}
	for _, node := range sortedKeys(c.nodes) {
		out = append(out, c.nodeReports(node)...)
	}
	return out
}

func healthFix(causes, node string) string {
	switch {
	case strings.Contains(causes, "ImageMissing"), strings.Contains(causes, "ImageDeleted"):
		return "the data is gone (or goes when the device is detached): copy out what you can now, then restore a VolumeSnapshot into a new PVC, or delete the PVC"
	case strings.Contains(causes, "LoopDeviceGone"):
		return "the pod's device was detached underneath it: delete the pod so kubelet stages and publishes the volume again"
	case strings.Contains(causes, "QuotaEscapeRepaired"):
		return "a process in the pod made a btrfs subvolume outside its volume's quota; filevol put it back under the volume's limit (the volume may stand over its size until the pod deletes data). Find the workload that did it; to close the window entirely, deny the btrfs subvolume ioctls to pods with a seccomp profile (docs/security.md)"
	case strings.Contains(causes, "FilesystemReadOnly"):
		return "the kernel remounted the filesystem read-only after I/O errors: check the pool's disk on node " + node + " (dmesg), stop the pods, and let the next stage run fsck"
	}
	return "see kubectl filevol describe and the driver's log on node " + node
}

// nodeReports: orphans and pool space on one node.
func (c *cluster) nodeReports(node string) []Finding {
	var out []Finding
	if r := c.views[node]; r != nil {
		if len(r.Quarantine) > 0 {
			out = append(out, orphanFinding(node, fmt.Sprintf("%d image(s) without a volume record in %s/quarantine: %s", len(r.Quarantine), r.PoolDir, strings.Join(r.Quarantine, ", "))))
		}
	} else if e := c.lastEvent("Node", "", node, reasonOrphanQuarantined); e != nil {
		out = append(out, orphanFinding(node, fmt.Sprintf("the driver's event (%s ago): %s", age(c.now.Sub(eventTime(*e))), oneLine(e.Message))))
	}
	if e := c.lastEvent("Node", "", node, reasonPoolNearlyFull, reasonPoolSpaceOK); e != nil && e.Reason == reasonPoolNearlyFull {
		out = append(out, Finding{Severity: SevWarning, Kind: "Node", Name: node, Problem: "filevol pool nearly full",
			Cause: fmt.Sprintf("the driver's event (%s ago): %s", age(c.now.Sub(eventTime(*e))), oneLine(e.Message)),
			Fix:   "free space in the pool (delete PVCs or VolumeSnapshots no longer needed) or grow its filesystem; thin volumes fail writes with ENOSPC when it fills"})
	}
	return out
}

func orphanFinding(node, cause string) Finding {
	return Finding{Severity: SevWarning, Kind: "Node", Name: node, Problem: "the driver quarantined orphaned image files",
		Cause: cause,
		Fix:   "filevol never deletes them (they may hold data): on node " + node + ", attach one read-only (losetup -r), mount it read-only, copy out what matters, then remove the file"}
}
