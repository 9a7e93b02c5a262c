package kubectlplugin

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// multiAttachStory: pod db-1 on node-2 waits for a ReadWriteOnce volume
// that VolumeAttachment csi-a1 still attaches to node-1.
func multiAttachStory(msg string, onNode1 ...runtime.Object) []runtime.Object {
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-a1"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: "node-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr("pvc-db")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
	objs := []runtime.Object{node("node-2"), csiNode("node-2"),
		pv("pvc-db", "fv1-img-3f9a0c2e-00000000000000000000000000000001", "node-1", "app", "db"),
		pvc("app", "db", "1Gi", "pvc-db"), va,
		creatingPod("app", "db-1", "node-2", "db"),
		event("Pod", "app", "db-1", "Warning", "FailedAttachVolume", msg, 30*time.Second)}
	return append(objs, onNode1...)
}

const k8sMultiAttach = `Multi-Attach error for volume "pvc-db" Volume is already exclusively attached to one node and can't be attached to another`

func TestDoctorMultiAttach(t *testing.T) {
	t.Run("the old pod still runs on the other node", func(t *testing.T) {
		out := run(t, nil, []string{"doctor"}, append(base(), multiAttachStory(k8sMultiAttach, pod("app", "db-0", "node-1", "db"))...)...)
		mustContain(t, out,
			"ERROR   pod/db-1 -n app: stuck in ContainerCreating",
			"cause: the volume is ReadWriteOnce and VolumeAttachment csi-a1 attaches it to node node-1 (attached: true), where pod app/db-0 still uses it",
			"kubelet on node node-2 (FailedAttachVolume, 30s ago): Multi-Attach error",
			"fix:   a ReadWriteOnce volume follows its pod once the old pod is gone: delete pod app/db-0 on node node-1")
	})
	t.Run("filevol's own refusal, the other node down", func(t *testing.T) {
		down := node("node-1")
		down.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
		msg := `AttachVolume.Attach failed for volume "pvc-db" : rpc error: code = FailedPrecondition desc = volume fv1-img-3f9a0c2e-00000000000000000000000000000001 is attached to node node-1 since 2026-11-24T10:00:00Z`
		objs := append([]runtime.Object{csiDriver(), storageClass(), down, csiNode("node-1")}, multiAttachStory(msg)...)
		out := run(t, nil, []string{"doctor"}, objs...)
		mustContain(t, out,
			"which is NotReady: kubelet there cannot confirm the unmount, so Kubernetes waits 6 minutes before it force-detaches",
			"kubectl taint node node-1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
	})
	t.Run("fencing refuses while the old node's device holds the image", func(t *testing.T) {
		msg := `AttachVolume.Attach failed for volume "pvc-db" : rpc error: code = FailedPrecondition desc = node node-1 still holds the image of volume fv1-img-3f9a0c2e-00000000000000000000000000000001 open for writing`
		out := run(t, nil, []string{"doctor"}, append(base(), multiAttachStory(msg)...)...)
		mustContain(t, out,
			"cause: filevol refuses the attach: another node's loop device still holds the image and could write to it (fencing)",
			"no pod uses it there any more, so the csi-attacher should detach it")
	})
	t.Run("fencing after a force-detach: no VolumeAttachment names the holder any more", func(t *testing.T) {
		msg := `AttachVolume.Attach failed for volume "pvc-db" : rpc error: code = FailedPrecondition desc = loop device is locked: node node-1 (detached at 2026-11-24T10:00:00Z) still holds the image of volume fv1-img-3f9a0c2e-00000000000000000000000000000001 open for writing through its loop device`
		objs := multiAttachStory(msg)
		for i, o := range objs {
			if _, ok := o.(*storagev1.VolumeAttachment); ok {
				objs = append(objs[:i], objs[i+1:]...)
				break
			}
		}
		out := run(t, nil, []string{"doctor"}, append(base(), objs...)...)
		mustContain(t, out,
			"cause: filevol refuses the attach: another node's loop device still holds the image and could write to it (fencing)",
			"fix:   the volume is already detached from node node-1 in Kubernetes, but node node-1's loop device still holds the image",
			"start filevol (its node pod) and kubelet on node node-1 again",
			"attaches the volume to node node-2 at its next retry")
	})
}

// fenced after a force-detach, with filevol's refusal naming what node-1
// recorded of its device: doctor's fix says which device and, when its
// detach waits for holders, by what, instead of only advising losetup -d.
func TestDoctorFencedDeviceStillHeld(t *testing.T) {
	const refused = `AttachVolume.Attach failed for volume "pvc-db" : rpc error: code = FailedPrecondition desc = backing file locked by another holder: node node-1 (detached at 2026-11-24T10:00:00Z) still holds the image of volume fv1-img-3f9a0c2e-00000000000000000000000000000001 open for writing through its loop device, so it could still write to it; it lets go when filevol on that node unstages the volume, when the node's loop device is detached, or when the node's client is cut off from the pool's storage`
	doctor := func(msg string) string {
		objs := multiAttachStory(msg)
		for i, o := range objs {
			if _, ok := o.(*storagev1.VolumeAttachment); ok {
				objs = append(objs[:i], objs[i+1:]...)
				break
			}
		}
		return run(t, nil, []string{"doctor"}, append(base(), objs...)...)
	}
	t.Run("the device recorded", func(t *testing.T) {
		out := doctor(refused + `; node node-1 staged it through its loop device /dev/loop3: if that device was detached there and still exists (losetup -l on node node-1 shows it with AUTOCLEAR 1), its detach waits for whatever still holds it open`)
		mustContain(t, out,
			"cause: filevol refuses the attach: another node's loop device still holds the image and could write to it (fencing)",
			"fix:   the volume is already detached from node node-1 in Kubernetes, but node node-1's loop device still holds the image (its device there is /dev/loop3)",
			"start filevol (its node pod) and kubelet on node node-1 again",
			"detach /dev/loop3 there (losetup -d /dev/loop3); if it was detached already and stays (losetup -l shows it with AUTOCLEAR 1), something still holds it open",
			"fuser -vm /dev/loop3 or lsof /dev/loop3",
			"attaches the volume to node node-2 at its next retry")
	})
	t.Run("its detach pending, held by a mount and a process", func(t *testing.T) {
		out := doctor(refused + `; node node-1's loop device /dev/loop3 is detached but its detach is pending, because the device is still held: device 7:3 is mounted in this mount namespace at /var/lib/kubelet/plugins/kubernetes.io/csi/shared.filevol.csi.io/0a1b/globalmount; open by pid 4242 (sleep) (seen by filevol on node node-1 at 2026-11-24T10:05:00Z); the kernel lets go of the device, and of the image, only at its last close, so losetup -d again changes nothing: end those holders on node node-1 (the pod that still uses the volume there, a mount, a process)`)
		mustContain(t, out,
			"node node-1's loop device still holds the image (its device there is /dev/loop3): its detach (losetup -d) is pending, because the device is still held: "+
				"device 7:3 is mounted in this mount namespace at /var/lib/kubelet/plugins/kubernetes.io/csi/shared.filevol.csi.io/0a1b/globalmount; open by pid 4242 (sleep) (seen by filevol on node node-1 at 2026-11-24T10:05:00Z)",
			"so losetup -d again changes nothing; end those holders: start filevol (its node pod) and kubelet on node node-1 again",
			"remove the taint once node node-1 is back",
			"or on node node-1 unmount it and stop the processes by hand",
			"attaches the volume to node node-2 at its next retry")
		if strings.Contains(out, "detach its loop device there (losetup -d)") {
			t.Errorf("doctor advises losetup -d for a device whose detach is pending:\n%s", out)
		}
	})
	t.Run("nothing recorded: the fix as before", func(t *testing.T) {
		want := "the volume is already detached from node node-1 in Kubernetes, but node node-1's loop device still holds the image: " +
			"start filevol (its node pod) and kubelet on node node-1 again, so that kubelet unmounts the volume and filevol unstages it " +
			"(with the out-of-service taint on it, remove the taint once node node-1 is back, or the DaemonSet does not run filevol there); " +
			"if node node-1 can write no more (powered off, cut off from the pool's storage) detach its loop device there (losetup -d); " +
			"Kubernetes then attaches the volume to node node-2 at its next retry"
		if got := fenceFix(refused, "node-2"); got != want {
			t.Errorf("fenceFix =\n%s\nwant\n%s", got, want)
		}
	})
}
