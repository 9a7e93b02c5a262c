package kubectlplugin

import (
	"fmt"
	"strings"

	"github.com/filevol/filevol/internal/volctx"
)

// The volume context keys a directory volume of a pool without quota
// carries, read from the PV.
const (
	contextSizeEnforced = volctx.SizeEnforced
	contextSizeNote     = volctx.SizeNote
)

// checkUnenforcedSizes names every bound volume whose size is not
// enforced (a directory pool without quota, a class with
// allowUnenforcedSize: "true"): its claim can grow past its size until
// the pool's filesystem is full, for every volume on it.
func checkUnenforcedSizes(c *cluster) []Finding {
	var out []Finding
	for i := range c.pvs {
		pv := &c.pvs[i]
		if pv.Spec.CSI == nil || pv.Spec.CSI.VolumeAttributes[contextSizeEnforced] != "false" {
			continue
		}
		claim := "no claim"
		if ref := pv.Spec.ClaimRef; ref != nil {
			claim = "claim " + ref.Namespace + "/" + ref.Name
		}
		size := pv.Spec.Capacity.Storage()
		out = append(out, Finding{Severity: SevWarning, Kind: "PersistentVolume", Name: pv.Name, pv: pv.Name,
			Problem: fmt.Sprintf("size %s NOT enforced (%s): its directory pool has no quota", size.String(), claim),
			Cause: strings.TrimSpace(pv.Spec.CSI.VolumeAttributes[contextSizeNote] +
				"\nits StorageClass sets allowUnenforcedSize: \"true\", and the node's directory pool is not on btrfs"),
			Fix: "to enforce sizes, serve the directory pool (--dir-pool-dir) from btrfs and move the data to a new claim; " +
				"until then watch the pool's free space (kubectl filevol volumes)"})
	}
	return out
}
