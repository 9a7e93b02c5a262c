package kubectlplugin

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// secretTrouble reports a stage that failed on an encrypted volume's
// node-stage Secret: kubelet could not fetch it (missing, or in another
// namespace), or filevol refused the key it holds (not the key the
// volume's data key was wrapped with; the driver names the Secret's
// fields).
func secretTrouble(msg string) bool {
	return strings.Contains(msg, "NodeStageSecretRef") || strings.Contains(msg, "node-stage Secret")
}

// secretCause names the PV's node-stage Secret and what to do about it.
func secretCause(pvs []*corev1.PersistentVolume, msg, cause string) (string, string) {
	ref := "the StorageClass's csi.storage.k8s.io/node-stage-secret-name"
	for _, pv := range pvs {
		if pv.Spec.CSI != nil && pv.Spec.CSI.NodeStageSecretRef != nil {
			r := pv.Spec.CSI.NodeStageSecretRef
			ref = fmt.Sprintf("Secret %s/%s (the node-stage Secret of %s)", r.Namespace, r.Name, pv.Name)
			break
		}
	}
	if strings.Contains(msg, "NodeStageSecretRef") {
		return "the volume is encrypted and kubelet cannot read its node-stage Secret: " + ref + " is missing or unreadable\n" + cause,
			"create " + ref + " with the key the volume was made with (field encryptionKey); the data cannot be opened without it"
	}
	return "the volume is encrypted and " + ref + " does not hold the key its data key was wrapped with (nothing was formatted or changed)\n" + cause,
		"put the volume's key back in " + ref + " as encryptionKey; while rotating, keep the old key as previousEncryptionKey until every volume was staged once"
}
