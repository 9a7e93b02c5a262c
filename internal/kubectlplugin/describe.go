package kubectlplugin

import (
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// target is what describe was asked about, resolved.
type target struct {
	pvc *corev1.PersistentVolumeClaim
	pv  *corev1.PersistentVolume
}

// resolve parses pvc/NAME or pv/NAME (long forms too).
func resolve(c *cluster, arg, namespace string) (target, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok || name == "" {
		return target{}, fmt.Errorf("describe wants pvc/NAME or pv/NAME, not %q", arg)
	}
	var t target
	switch strings.ToLower(kind) {
	case "pvc", "persistentvolumeclaim", "persistentvolumeclaims":
		if t.pvc = c.pvc(namespace, name); t.pvc == nil {
			return t, fmt.Errorf("persistentvolumeclaim %q not found in namespace %q", name, namespace)
		}
		t.pv = c.pv(t.pvc.Spec.VolumeName)
	case "pv", "persistentvolume", "persistentvolumes":
		if t.pv = c.pv(name); t.pv == nil {
			return t, fmt.Errorf("persistentvolume %q not found, or not a %s volume", name, c.driver)
		}
		t.pvc = c.claimOf(t.pv)
	default:
		return t, fmt.Errorf("describe wants pvc/NAME or pv/NAME, not %q", arg)
	}
	return t, nil
}

// describe writes the chain PVC → PV → VolumeAttachment → node → pods,
// the driver's view from the node, the recent events and the problems.
func describe(w io.Writer, c *cluster, t target) {
	section := func(title string) { fmt.Fprintf(w, "%s\n", title) }
	field := func(k, v string) { fmt.Fprintf(w, "  %-14s %s\n", k+":", v) }
	var pods []corev1.Pod
	if t.pvc != nil {
		pvc := t.pvc
		pods = c.podsUsing(pvc.Namespace, pvc.Name)
		section(fmt.Sprintf("PersistentVolumeClaim %s/%s", pvc.Namespace, pvc.Name))
		status := string(pvc.Status.Phase)
		if pvc.DeletionTimestamp != nil {
			status = "Terminating"
		}
		field("Status", fmt.Sprintf("%s, requests %s", status, quantity(request(pvc))))
		field("StorageClass", orDash(className(pvc)))
		if n := pvc.Annotations[annSelectedNode]; n != "" {
			field("Selected node", n)
		}
		if len(pvc.Finalizers) > 0 {
			field("Finalizers", strings.Join(pvc.Finalizers, ", "))
		}
	}
	node := ""
	if pv := t.pv; pv != nil {
		node = c.nodeOf(pv)
		section("PersistentVolume " + pv.Name)
		status := string(pv.Status.Phase)
		if pv.DeletionTimestamp != nil {
			status = "Terminating since " + pv.DeletionTimestamp.UTC().Format("2006-01-02 15:04:05Z")
		}
		q := pv.Spec.Capacity[corev1.ResourceStorage]
		mode := string(corev1.PersistentVolumeFilesystem)
		if pv.Spec.VolumeMode != nil {
			mode = string(*pv.Spec.VolumeMode)
		}
		field("Status", status)
		field("Size", fmt.Sprintf("%s, %s, %s, reclaim %s", quantity(&q), mode, accessModes(pv.Spec.AccessModes), pv.Spec.PersistentVolumeReclaimPolicy))
		field("Volume ID", pv.Spec.CSI.VolumeHandle)
		if len(pv.Finalizers) > 0 {
			field("Finalizers", strings.Join(pv.Finalizers, ", "))
		}
		if pods == nil {
			pods = c.claimPods(pv)
		}
		vas := c.attachmentsOf(pv.Name)
		if len(vas) == 0 {
			none := "VolumeAttachment: none"
			if c.csiDriver != nil && c.csiDriver.Spec.AttachRequired != nil && !*c.csiDriver.Spec.AttachRequired {
				none += " (attachRequired: false, none expected)"
			}
			section(none)
		}
		for _, va := range vas {
			section("VolumeAttachment " + va.Name)
			field("Node", va.Spec.NodeName)
			field("State", vaState(va))
		}
	}
	if node == "" && t.pvc != nil {
		node = t.pvc.Annotations[annSelectedNode]
	}
	if node != "" {
		section("Node " + node)
		field("Status", c.nodeStatus(node))
	}
	section("Pods")
	if len(pods) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, p := range pods {
		fmt.Fprintf(w, "  %s/%s  %s on %s\n", p.Namespace, p.Name, podPhase(&p), orDash(p.Spec.NodeName))
	}
	if t.pv != nil {
		describeView(w, c, node, t.pv.Spec.CSI.VolumeHandle)
	}
	describeEvents(w, c, t, pods)
	var mine []Finding
	for _, f := range diagnose(c) {
		if (t.pv != nil && f.pv == t.pv.Name) || (t.pvc != nil && f.Kind == "PersistentVolumeClaim" && f.Namespace == t.pvc.Namespace && f.Name == t.pvc.Name) {
			mine = append(mine, f)
		}
	}
	section("Problems")
	if len(mine) == 0 {
		fmt.Fprintln(w, "  none found")
	}
	for _, f := range mine {
		fmt.Fprintf(w, "  %s %s: %s\n", strings.ToUpper(f.Severity), f.Object(), f.Problem)
		writeIndented(w, "  cause: ", f.Cause)
		writeIndented(w, "  fix:   ", f.Fix)
	}
}

func (c *cluster) nodeStatus(node string) string {
	n, ok := c.nodes[node]
	if !ok {
		if len(c.nodes) == 0 {
			return "unknown (nodes not readable)"
		}
		return "GONE: no such node"
	}
	ready := "NotReady"
	if nodeReady(n) {
		ready = "Ready"
	}
	reg := "driver not registered with kubelet"
	for _, d := range c.csiNodes[node].Spec.Drivers {
		if d.Name == c.driver {
			reg = "driver registered with kubelet"
		}
	}
	return ready + ", " + reg
}

func podPhase(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil {
			return string(p.Status.Phase) + " (" + cs.State.Waiting.Reason + ")"
		}
	}
	return string(p.Status.Phase)
}

// describeView writes the driver's own view of the volume from its node.
func describeView(w io.Writer, c *cluster, node, id string) {
	fmt.Fprintf(w, "Driver's view from node %s\n", orDash(node))
	field := func(k, v string) { fmt.Fprintf(w, "  %-14s %s\n", k+":", v) }
	if err := c.viewErrs[node]; err != nil {
		fmt.Fprintf(w, "  unavailable: %v\n", err)
		return
	}
	v := c.viewVolume(node, id)
	if v == nil {
		if c.views[node] == nil {
			fmt.Fprintln(w, "  not asked (--via=none)")
		} else {
			fmt.Fprintf(w, "  the driver on %s has no record of %s\n", node, id)
		}
		return
	}
	r := v.Record
	field("Record", fmt.Sprintf("%s, %s, %s, %s, created %s", r.ID, sizeStr(r.CapacityBytes), orDash(r.FSType), r.Provisioning, r.CreatedAt.UTC().Format("2006-01-02 15:04:05Z")))
	field("Encryption", encryptionStr(r))
	if v.Image.Exists {
		field("Image", fmt.Sprintf("%s (%s, %s allocated)", v.Image.Path, sizeStr(v.Image.SizeBytes), sizeStr(v.Image.AllocatedBytes)))
	} else if v.Image.Pending {
		field("Image", v.Image.Path+" not made yet: a blank volume gets its image at its first use")
	} else {
		field("Image", v.Image.Path+" MISSING")
	}
	field("State", v.State)
	for _, d := range v.LoopDevices {
		extra := ""
		if d.ReadOnly {
			extra += ", read-only"
		}
		if d.Deleted {
			extra += ", backing file DELETED"
		}
		field("Loop device", d.Path+extra)
	}
	for _, m := range v.Staging {
		field("Staging", mountLine(m, c))
	}
	for _, m := range v.Targets {
		field("Target", mountLine(m, c))
	}
	if u := v.Usage; u != nil {
		field("Usage", fmt.Sprintf("%s of %s used, %s available", sizeStr(u.UsedBytes), sizeStr(u.TotalBytes), sizeStr(u.AvailableBytes)))
	}
	if len(v.Health) == 0 {
		field("Health", "ok")
	}
	for _, h := range v.Health {
		field("Health", fmt.Sprintf("%s (%s): %s", h.Reason, h.Status, oneLine(h.Message)))
	}
}

func mountLine(m api.Mount, c *cluster) string {
	s := m.Path + " (" + m.FSType
	if m.ReadOnly {
		s += ", ro"
	}
	s += ")"
	if m.PodUID != "" {
		s += " pod " + c.podByUID(m.PodUID)
	}
	return s
}

func (c *cluster) podByUID(uid string) string {
	for _, p := range c.pods {
		if string(p.UID) == uid {
			return p.Namespace + "/" + p.Name
		}
	}
	return "uid " + uid
}

// describeEvents lists the newest events of the chain's objects.
func describeEvents(w io.Writer, c *cluster, t target, pods []corev1.Pod) {
	var evs []corev1.Event
	if t.pvc != nil {
		evs = append(evs, c.eventsFor("PersistentVolumeClaim", t.pvc.Namespace, t.pvc.Name)...)
	}
	if t.pv != nil {
		evs = append(evs, c.eventsFor("PersistentVolume", "", t.pv.Name)...)
	}
	for _, p := range pods {
		for _, e := range c.eventsFor("Pod", p.Namespace, p.Name) {
			if e.Type == corev1.EventTypeWarning {
				evs = append(evs, e)
			}
		}
	}
	slices.SortStableFunc(evs, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	fmt.Fprintln(w, "Events")
	if len(evs) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for i, e := range evs {
		if i == 10 {
			fmt.Fprintf(w, "  ... %d more\n", len(evs)-10)
			break
		}
		fmt.Fprintf(w, "  %-5s %-7s %-20s %s/%s: %s\n", age(c.now.Sub(eventTime(e))), e.Type, e.Reason,
			strings.ToLower(e.InvolvedObject.Kind), e.InvolvedObject.Name, oneLine(e.Message))
	}
}
