package kubectlplugin

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// stuckDetachStory is the stuck deleted PV on an attached volume: the pod and the claim
// are gone, the PV was deleted, and VolumeAttachment csi-a1 still attaches
// it to node-1, which kubelet there has not unmounted.
func stuckDetachStory(n *corev1.Node, cn *storagev1.CSINode, more ...runtime.Object) []runtime.Object {
	const id = "fv1-img-3f9a0c2e-00000000000000000000000000000001"
	p := pv("pvc-db", id, "node-1", "app", "db")
	p.Finalizers = []string{finalizerAttacherPfx + "filevol-csi-io", finalizerProvisioner}
	p.DeletionTimestamp = ptr(ago(5 * time.Minute))
	p.Status.Phase = corev1.VolumeReleased
	n.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/" + driver + "^" + id}
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-a1"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: "node-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr("pvc-db")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
	objs := []runtime.Object{csiDriver(), storageClass(), n, cn, p, va,
		event("PersistentVolume", "", "pvc-db", "Warning", "VolumeFailedDelete", "persistentvolume pvc-db is still attached to node node-1", time.Minute)}
	return append(objs, more...)
}

func TestDoctorDetachBlocked(t *testing.T) {
	t.Run("the node plugin is not registered", func(t *testing.T) {
		unregistered := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
		out := run(t, nil, []string{"doctor"}, stuckDetachStory(node("node-1"), unregistered)...)
		mustContain(t, out,
			"ERROR   node/node-1: filevol.csi.io is not registered with kubelet",
			"ERROR   pv/pvc-db: stuck Terminating for 5m, held by finalizers external-attacher/filevol-csi-io, "+finalizerProvisioner,
			"VolumeAttachment csi-a1 still attaches it to node node-1 (attached: true): no pod uses it, but filevol.csi.io's node plugin is not registered on node node-1 (CSINode node-1 does not list it), so kubelet there cannot unmount it, and still lists it in use (node status volumesInUse)",
			"start filevol.csi.io's node plugin on node node-1 again (its pod, or the host process with --registration-dir); kubelet then unmounts the volume, csi-attacher detaches it",
			"kubectl taint node node-1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
			"the provisioner deletes the volume once it is detached")
	})
	t.Run("the DaemonSet no longer runs on the node", func(t *testing.T) {
		unregistered := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
		ctrl := pod("filevol", "filevol-shared-controller-0", "node-1", "")
		ctrl.Labels = map[string]string{"app.kubernetes.io/name": "filevol", "app.kubernetes.io/component": "shared-controller"}
		out := run(t, nil, []string{"doctor"}, stuckDetachStory(node("node-1"), unregistered, ctrl)...)
		mustContain(t, out, "no node pod of the driver runs there: check the DaemonSet's nodeSelector, affinity and tolerations against node node-1")
	})
	t.Run("registered, the unmount fails", func(t *testing.T) {
		out := run(t, nil, []string{"doctor"}, stuckDetachStory(node("node-1"), csiNode("node-1"))...)
		mustContain(t, out,
			"no pod uses it, but kubelet on node-1 still lists it in use (node status volumesInUse), so it has not unmounted it",
			"read kubelet's log on node node-1 and the log of filevol.csi.io's node plugin there for the failing NodeUnpublishVolume or NodeUnstageVolume")
	})
}
