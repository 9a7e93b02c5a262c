package kubectlplugin

import (
	"fmt"
	"strings"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// checkVolumesWithoutPV names the volumes a node's pool holds that no
// PersistentVolume of the driver names by its volumeHandle. filevol never
// deletes such a volume on its own: it is what a Retain policy keeps after
// its PV was deleted, or what a provisioner left when it could not save the
// PV. Either way it holds data and takes pool space that no claim can use.
//
// Only volumes older than the grace are named: a volume just made has no
// PV until the provisioner saves it. A volume in a pool that several nodes
// share is named once, under the first node (by name) that lists it.
func checkVolumesWithoutPV(c *cluster) []Finding {
	named := map[string]bool{}
	for i := range c.pvs {
		named[c.pvs[i].Spec.CSI.VolumeHandle] = true
	}
	seen := map[string]bool{}
	var out []Finding
	for _, node := range sortedKeys(c.views) {
		r := c.views[node]
		var lines, ids []string
		for _, v := range r.Volumes {
			id := v.Record.ID
			if named[id] || seen[id] || v.Record.CreatedAt.IsZero() || c.now.Sub(v.Record.CreatedAt) < c.grace {
				continue
			}
			seen[id] = true
			ids = append(ids, id)
			lines = append(lines, unnamedVolumeLine(c, v))
		}
		if len(ids) == 0 {
			continue
		}
		out = append(out, Finding{Severity: SevWarning, Kind: "Node", Name: node,
			Problem: fmt.Sprintf("%s in the pool that no PersistentVolume names", plural(len(ids), "volume")),
			Cause:   strings.Join(lines, "\n"),
			Fix:     unnamedVolumeFix(c.driver, node, ids)})
	}
	return out
}

func unnamedVolumeLine(c *cluster, v api.Volume) string {
	s := fmt.Sprintf("volume %s (%s, made %s ago", v.Record.ID, sizeStr(v.Record.CapacityBytes), age(c.now.Sub(v.Record.CreatedAt)))
	if v.PV != "" {
		s += ", for PV " + v.PV
	}
	if v.PVCName != "" {
		s += fmt.Sprintf(" of claim %s/%s", v.PVCNamespace, v.PVCName)
	}
	s += ", " + v.State + ")"
	if len(v.Targets) > 0 {
		s += fmt.Sprintf(": still published at %d target(s)", len(v.Targets))
	}
	return s
}

// unnamedVolumeFix says how to keep or free such a volume with nothing but
// Kubernetes objects: a PV that names it is bound again or, released with
// the Delete policy, deleted by the provisioner through DeleteVolume.
func unnamedVolumeFix(driver, node string, ids []string) string {
	return fmt.Sprintf("its data is still there, and filevol never deletes it on its own. "+
		"To use it, create a PersistentVolume with spec.csi.driver %s and spec.csi.volumeHandle %s "+
		"(node affinity %s=%s for a node-local pool) and bind a claim to it. "+
		"To delete it, create that PersistentVolume with the annotation pv.kubernetes.io/provisioned-by: %s, "+
		"persistentVolumeReclaimPolicy: Delete and a claimRef to a claim that no longer exists: "+
		"it is Released at once and the provisioner deletes the volume",
		driver, strings.Join(ids, ", "), TopologyKey, node, driver)
}
