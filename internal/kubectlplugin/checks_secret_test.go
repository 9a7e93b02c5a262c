package kubectlplugin

import (
	"testing"
	"time"

	"github.com/filevol/filevol/internal/nodeview/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// stuckOnSecret is a pod of an encrypted volume whose stage failed on its
// node-stage Secret, with kubelet's event message msg.
func stuckOnSecret(msg string) []runtime.Object {
	p := pv("pvc-vault", "fv-vault", "node-1", "app", "vault-data")
	p.Spec.CSI.NodeStageSecretRef = &corev1.SecretReference{Namespace: "app", Name: "vault-key"}
	return []runtime.Object{
		p,
		pvc("app", "vault-data", "1Gi", "pvc-vault"),
		creatingPod("app", "vault-0", "node-1", "vault-data"),
		event("Pod", "app", "vault-0", "Warning", "FailedMount", msg, 20*time.Second),
	}
}

// TestDoctorPodStuckOnItsSecret: doctor names the encrypted volume's
// node-stage Secret, whether kubelet could not read it or filevol
// refused the key it holds.
func TestDoctorPodStuckOnItsSecret(t *testing.T) {
	views := fakeViewer{"node-1": {Node: "node-1", Volumes: []api.Volume{{Record: api.Record{ID: "fv-vault", Encryption: "fscrypt"}, State: api.StateIdle}}}}
	missing := `MountVolume.MountDevice failed for volume "pvc-vault" : fetching NodeStageSecretRef app/vault-key failed: kubernetes.io/csi: failed to find the secret vault-key in the namespace app with error: secrets "vault-key" not found`
	out := run(t, views, []string{"doctor"}, append(base(), stuckOnSecret(missing)...)...)
	mustContain(t, out,
		"ERROR   pod/vault-0 -n app: stuck in ContainerCreating for 10m on node node-1, waiting for volume vault-data",
		"cause: the volume is encrypted and kubelet cannot read its node-stage Secret: Secret app/vault-key (the node-stage Secret of pvc-vault) is missing or unreadable",
		"fix:   create Secret app/vault-key (the node-stage Secret of pvc-vault) with the key the volume was made with")

	wrong := `MountVolume.MountDevice failed for volume "pvc-vault" : rpc error: code = FailedPrecondition desc = the node-stage Secret's encryptionKey is not the key the data key of volume fv-vault was wrapped with (during a rotation, keep the old key as previousEncryptionKey until every volume was staged once); the volume was left as it was`
	out = run(t, views, []string{"doctor"}, append(base(), stuckOnSecret(wrong)...)...)
	mustContain(t, out,
		"cause: the volume is encrypted and Secret app/vault-key (the node-stage Secret of pvc-vault) does not hold the key its data key was wrapped with (nothing was formatted or changed)",
		"fix:   put the volume's key back in Secret app/vault-key (the node-stage Secret of pvc-vault) as encryptionKey")
}
