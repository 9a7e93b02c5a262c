package kubectlplugin

import (
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// VolumeRow is one line of `kubectl filevol volumes` (and one object of
// its -o json|yaml).
type VolumeRow struct {
	PV        string `json:"pv"`
	Namespace string `json:"namespace,omitempty"`
	PVC       string `json:"pvc,omitempty"`
	Node      string `json:"node,omitempty"`
	SizeBytes int64  `json:"sizeBytes"`
	// UsedBytes is filesystem usage from the driver's node view (block:
	// the image's allocated bytes); -1 when unknown.
	UsedBytes int64  `json:"usedBytes"`
	Mode      string `json:"mode"`
	Access    string `json:"access"`
	// Status is the PV's phase, or Terminating.
	Status string `json:"status"`
	// State is what the driver sees on the node (idle, attached, staged,
	// published) and its abnormal conditions; "?" when it could not be asked.
	State    string `json:"state"`
	VolumeID string `json:"volumeID"`
}

// volumeRows builds a row per filevol PV.
func volumeRows(c *cluster) []VolumeRow {
	rows := []VolumeRow{}
	for i := range c.pvs {
		pv := &c.pvs[i]
		r := VolumeRow{PV: pv.Name, Node: c.nodeOf(pv), UsedBytes: -1, VolumeID: pv.Spec.CSI.VolumeHandle,
			Status: string(pv.Status.Phase), Mode: string(corev1.PersistentVolumeFilesystem), State: "?"}
		if q, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
			r.SizeBytes = q.Value()
		}
		if pv.Spec.VolumeMode != nil {
			r.Mode = string(*pv.Spec.VolumeMode)
		}
		r.Access = accessModes(pv.Spec.AccessModes)
		if pv.DeletionTimestamp != nil {
			r.Status = "Terminating"
		}
		if ref := pv.Spec.ClaimRef; ref != nil {
			r.Namespace, r.PVC = ref.Namespace, ref.Name
		}
		if v := c.viewVolume(r.Node, r.VolumeID); v != nil {
			r.State = v.State
			for _, h := range v.Health {
				r.State += "," + h.Reason
			}
			switch {
			case v.Usage != nil:
				r.UsedBytes = v.Usage.UsedBytes
			case v.Image.Exists:
				r.UsedBytes = v.Image.AllocatedBytes
			}
		} else if c.views[r.Node] != nil {
			r.State = "no-record" // the node's driver does not know it
		}
		rows = append(rows, r)
	}
	return rows
}

func accessModes(modes []corev1.PersistentVolumeAccessMode) string {
	short := map[corev1.PersistentVolumeAccessMode]string{
		corev1.ReadWriteOnce: "RWO", corev1.ReadOnlyMany: "ROX", corev1.ReadWriteMany: "RWX", corev1.ReadWriteOncePod: "RWOP",
	}
	var out []string
	for _, m := range modes {
		out = append(out, short[m])
	}
	return strings.Join(out, ",")
}

// printVolumes writes the rows as a table.
func printVolumes(w io.Writer, c *cluster, rows []VolumeRow) error {
	if len(rows) == 0 {
		fmt.Fprintf(w, "No %s volumes.\n", c.driver)
		return nil
	}
	t := newTable(w, "PV", "NAMESPACE", "PVC", "NODE", "SIZE", "USED", "MODE", "STATUS", "STATE")
	for _, r := range rows {
		used := "-"
		if r.UsedBytes >= 0 {
			used = sizeStr(r.UsedBytes)
		}
		t.row(r.PV, orDash(r.Namespace), orDash(r.PVC), orDash(r.Node), sizeStr(r.SizeBytes), used,
			r.Mode+"/"+orDash(r.Access), r.Status, r.State)
	}
	return t.flush()
}
