package kubectlplugin

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// TopologyKey is the topology label of every filevol volume: the node
// whose pool holds it.
const TopologyKey = "topology.filevol.csi.io/node"

// cluster is everything the commands look at, read once.
type cluster struct {
	driver string
	now    time.Time
	// grace is how long a claim or pod may wait before it is called stuck
	// (provisioning and mounting take seconds).
	grace time.Duration

	csiDriver  *storagev1.CSIDriver // nil: not installed
	pvs        []corev1.PersistentVolume
	pvcs       []corev1.PersistentVolumeClaim
	classes    map[string]storagev1.StorageClass
	vas        []storagev1.VolumeAttachment
	nodes      map[string]corev1.Node
	csiNodes   map[string]storagev1.CSINode
	pods       []corev1.Pod
	events     []corev1.Event
	capacities []storagev1.CSIStorageCapacity
	driverPods []corev1.Pod
	// dataMovers are velero's DataUploads and DataDownloads (none without
	// velero, or without a dynamic client).
	dataMovers []dataMover

	// views are the drivers' node-side views by node; viewErrs why one
	// could not be had.
	views    map[string]*api.Report
	viewErrs map[string]error
	// notes are things that could not be read (RBAC, API not served).
	notes []string
}

// ours reports whether the claim is provisioned, or to be provisioned, by
// the driver.
func (c *cluster) ours(pvc *corev1.PersistentVolumeClaim) bool {
	for _, k := range []string{"volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner"} {
		if pvc.Annotations[k] == c.driver {
			return true
		}
	}
	if pvc.Spec.StorageClassName != nil {
		if sc, ok := c.classes[*pvc.Spec.StorageClassName]; ok && sc.Provisioner == c.driver {
			return true
		}
	}
	return pvc.Spec.VolumeName != "" && c.pv(pvc.Spec.VolumeName) != nil
}

// pv returns the driver's PV of that name, or nil.
func (c *cluster) pv(name string) *corev1.PersistentVolume {
	for i := range c.pvs {
		if c.pvs[i].Name == name {
			return &c.pvs[i]
		}
	}
	return nil
}

// pvc returns the claim, or nil.
func (c *cluster) pvc(namespace, name string) *corev1.PersistentVolumeClaim {
	for i := range c.pvcs {
		if c.pvcs[i].Namespace == namespace && c.pvcs[i].Name == name {
			return &c.pvcs[i]
		}
	}
	return nil
}

// claimOf returns the claim bound to pv, or nil.
func (c *cluster) claimOf(pv *corev1.PersistentVolume) *corev1.PersistentVolumeClaim {
	if pv.Spec.ClaimRef == nil {
		return nil
	}
	return c.pvc(pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
}

// nodeOf is the node whose pool holds pv: the value of its topology
// requirement, mapped to the Node carrying that label value (the driver's
// --node-id is usually the node name, but need not be).
func (c *cluster) nodeOf(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if (e.Key == TopologyKey || e.Key == corev1.LabelHostname) && len(e.Values) > 0 {
				return c.nodeByTopology(e.Values[0])
			}
		}
	}
	return ""
}

// nodeByTopology maps a topology value to a node name.
func (c *cluster) nodeByTopology(value string) string {
	if _, ok := c.nodes[value]; ok {
		return value
	}
	for name, n := range c.nodes {
		if n.Labels[TopologyKey] == value {
			return name
		}
	}
	return value
}

// nodeExists reports whether the node is known (true when nodes could not
// be listed at all: never claim a node is gone without having looked).
func (c *cluster) nodeExists(name string) bool {
	if len(c.nodes) == 0 {
		return true
	}
	_, ok := c.nodes[name]
	return ok
}

// podsUsing returns the pods that use the claim (generic ephemeral
// volumes included: their claim is named <pod>-<volume>).
func (c *cluster) podsUsing(namespace, claim string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range c.pods {
		if p.Namespace != namespace {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim) ||
				(v.Ephemeral != nil && p.Name+"-"+v.Name == claim) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// attachmentsOf returns the VolumeAttachments of pv.
func (c *cluster) attachmentsOf(pv string) []storagev1.VolumeAttachment {
	var out []storagev1.VolumeAttachment
	for _, va := range c.vas {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			out = append(out, va)
		}
	}
	return out
}

// eventsFor returns the events about an object, newest first.
func (c *cluster) eventsFor(kind, namespace, name string) []corev1.Event {
	var out []corev1.Event
	for _, e := range c.events {
		o := e.InvolvedObject
		if o.Kind == kind && o.Name == name && (namespace == "" || o.Namespace == namespace) {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	return out
}

// lastEvent returns the newest event about the object with one of the
// reasons, or nil.
func (c *cluster) lastEvent(kind, namespace, name string, reasons ...string) *corev1.Event {
	for _, e := range c.eventsFor(kind, namespace, name) {
		if len(reasons) == 0 || slices.Contains(reasons, e.Reason) {
			return &e
		}
	}
	return nil
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// viewVolume returns the driver's view of the volume from its node, or nil.
func (c *cluster) viewVolume(node, volumeID string) *api.Volume {
	r := c.views[node]
	if r == nil {
		return nil
	}
	for _, vols := range [][]api.Volume{r.Volumes, r.DirVolumes} {
		for i := range vols {
			if vols[i].Record.ID == volumeID {
				return &vols[i]
			}
		}
	}
	return nil
}
