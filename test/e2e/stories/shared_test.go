//go:build e2e

package stories

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The shared-pool driver as hack/tools/e2e/values-e2e.yaml installs it.
const (
	sharedDriver    = "shared.filevol.csi.io"
	sharedClass     = "filevol-shared"
	sharedTopoKey   = "topology.filevol.csi.io/pool"
	sharedPoolName  = "e2e-shared"
	sharedFinalizer = "external-attacher/shared-filevol-csi-io"
)

// sharedPool is the shared driver's pool directory; its stories skip
// without it (E2E_INSTALL=host installs no shared driver).
func sharedPool(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FILEVOL_E2E_SHARED_POOL")
	if dir == "" {
		t.Skip("FILEVOL_E2E_SHARED_POOL not set: no shared-pool driver installed")
	}
	return dir
}

// attachment waits until a VolumeAttachment of pv is attached and returns it.
func attachment(t *testing.T, pv string) storagev1.VolumeAttachment {
	t.Helper()
	var found storagev1.VolumeAttachment
	eventually(t, 2*time.Minute, "VolumeAttachment of "+pv+" attached", func() (bool, error) {
		vas, err := attachmentsOf(t.Context(), pv)
		if err != nil || len(vas) != 1 || !vas[0].Status.Attached {
			return false, err
		}
		found = vas[0]
		return true, nil
	})
	if found.Spec.Attacher != sharedDriver {
		t.Fatalf("VolumeAttachment %s: attacher %s, want %s", found.Name, found.Spec.Attacher, sharedDriver)
	}
	return found
}

func attachmentsOf(ctx context.Context, pv string) ([]storagev1.VolumeAttachment, error) {
	l, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []storagev1.VolumeAttachment
	for _, va := range l.Items {
		if n := va.Spec.Source.PersistentVolumeName; n != nil && *n == pv {
			out = append(out, va)
		}
	}
	return out, nil
}

// A claim on the shared driver: its volume belongs to the pool, not to a
// node (topology.filevol.csi.io/pool); the pod's node gets it attached
// (VolumeAttachment, ControllerPublishVolume), and once the pod is gone it
// is detached; the data stays in the pool for the next pod.
func TestSharedVolumeAttachedAndDetached(t *testing.T) {
	t.Parallel()
	sharedPool(t)
	ns := namespace(t)
	claim(t, ns, "data", claimOpts{class: sharedClass})
	startPod(t, ns, "writer", "data", false, `
head -c 4194304 /dev/urandom > /data/blob
sha256sum /data/blob | cut -d" " -f1 > /data/blob.sum
sync
sleep 3600`)
	pv := boundVolumeOf(t, ns, "data", sharedDriver)
	if got := pv.Spec.NodeAffinity; got == nil || !strings.Contains(got.String(), sharedTopoKey) || !strings.Contains(got.String(), sharedPoolName) {
		t.Errorf("volume %s: node affinity %v, want %s=%s", pv.Name, got, sharedTopoKey, sharedPoolName)
	}
	va := attachment(t, pv.Name)
	pod, err := cs.CoreV1().Pods(ns).Get(t.Context(), "writer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if va.Spec.NodeName != pod.Spec.NodeName {
		t.Errorf("VolumeAttachment %s attaches to node %s, the pod runs on %s", va.Name, va.Spec.NodeName, pod.Spec.NodeName)
	}
	deletePod(t, ns, "writer")
	eventually(t, 2*time.Minute, "VolumeAttachment "+va.Name+" detached and gone", func() (bool, error) {
		vas, err := attachmentsOf(t.Context(), pv.Name)
		return err == nil && len(vas) == 0, err
	})
	out := runPod(t, ns, "reader", "data", false, `
[ "$(sha256sum /data/blob | cut -d" " -f1)" = "$(cat /data/blob.sum)" ] && echo same`)
	if lastLine(out) != "same" {
		t.Fatalf("the next pod read %q: the data written before the detach changed", out)
	}
}

// The stuck detach users hit, for real: a volume of the shared driver whose VolumeAttachment
// cannot be detached, because the node's filevol node plugin is gone
// (its DaemonSet no longer runs on the node), so kubelet cannot unmount it.
// The pod and the claim are deleted; the PV is deleted too and stays
// Terminating behind external-attacher's finalizer. `kubectl filevol
// doctor` names the cause and the fix; the fix, applied, frees everything:
// no PV, no VolumeAttachment, nothing of the volume on the node or in the
// pool. Not parallel: it stops the node plugins every other story uses (Go
// runs it before the parallel ones).
func TestStuckAttachmentDoctorAndFix(t *testing.T) {
	pool := sharedPool(t)
	stop, start, plugin := os.Getenv("FILEVOL_E2E_STOP_NODE"), os.Getenv("FILEVOL_E2E_START_NODE"), os.Getenv("FILEVOL_E2E_KUBECTL_FILEVOL")
	if stop == "" || start == "" || plugin == "" {
		t.Skip("FILEVOL_E2E_STOP_NODE, FILEVOL_E2E_START_NODE or FILEVOL_E2E_KUBECTL_FILEVOL not set")
	}
	ns := namespace(t)
	claim(t, ns, "data", claimOpts{class: sharedClass})
	startPod(t, ns, "app", "data", false, `echo kept > /data/note; sync; sleep 3600`)
	pv := boundVolumeOf(t, ns, "data", sharedDriver)
	id := pv.Spec.CSI.VolumeHandle
	va := attachment(t, pv.Name)
	node := va.Spec.NodeName

	shell(t, stop)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			shell(t, start)
		}
	})
	// A pod whose volume kubelet cannot unmount stays Terminating; the user
	// deletes it outright, as people do.
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "app", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "pod app gone", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(t.Context(), "app", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "claim data gone", func() (bool, error) {
		_, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "data", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// Released; csi-provisioner will not delete a volume that is still
	// attached. The user deletes the PV, as users do.
	eventually(t, time.Minute, "volume "+pv.Name+" released", func() (bool, error) {
		p, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == v1.VolumeReleased, err
	})
	if err := cs.CoreV1().PersistentVolumes().Delete(t.Context(), pv.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("volume %s: %v (it should stay, Terminating)", pv.Name, err)
	}
	if p.DeletionTimestamp == nil || !slices.Contains(p.Finalizers, sharedFinalizer) {
		t.Fatalf("volume %s: deletion %v, finalizers %v; want Terminating behind %s", pv.Name, p.DeletionTimestamp, p.Finalizers, sharedFinalizer)
	}
	if vas, err := attachmentsOf(t.Context(), pv.Name); err != nil || len(vas) != 1 || vas[0].Name != va.Name {
		t.Fatalf("attachments of %s: %v (%v), want %s still there", pv.Name, vas, err, va.Name)
	}

	out := doctor(t, plugin)
	for _, want := range []string{
		"pv/" + pv.Name + ": stuck Terminating",
		sharedFinalizer,
		"VolumeAttachment " + va.Name + " still attaches it to node " + node,
		sharedDriver + "'s node plugin is not registered on node " + node,
		"start " + sharedDriver + "'s node plugin on node " + node + " again (no node pod of the driver runs there: check the DaemonSet's nodeSelector",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not say %q:\n%s", want, out)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("kubectl filevol doctor:\n%s", out)

	// The fix: the DaemonSet runs on the node again (start undoes stop's
	// nodeSelector), its node plugin registers, kubelet unmounts.
	shell(t, start)
	stopped = false
	eventually(t, 5*time.Minute, "volume "+pv.Name+" and its attachment gone", func() (bool, error) {
		_, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		vas, err := attachmentsOf(t.Context(), pv.Name)
		return err == nil && len(vas) == 0, err
	})
	if files := filesNamed(t, pool, id); len(files) != 0 {
		t.Errorf("volume %s deleted, but the shared pool still holds %v", id, files)
	}
	if devs := loopDevicesOn(t, id); len(devs) != 0 {
		t.Errorf("volume %s deleted, but loop devices %v still use its image", id, devs)
	}
	if m := mountsNaming(t, pv.Name); len(m) != 0 {
		t.Errorf("volume %s deleted, but the node still mounts %v", pv.Name, m)
	}
}

// doctor runs `kubectl filevol doctor` for the shared driver (the binary,
// as a user would) and returns what it printed.
func doctor(t *testing.T, plugin string) string {
	t.Helper()
	kc := os.Getenv("FILEVOL_E2E_KUBECONFIG")
	cmd := exec.CommandContext(t.Context(), plugin, "doctor", "--kubeconfig", kc, "--driver", sharedDriver,
		"--driver-namespace", "filevol", "--via", "none", "--min-age", "10s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// mountsNaming lists the mount points on the node whose path names s.
func mountsNaming(t *testing.T, s string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.Contains(f[1], s) {
			out = append(out, f[1])
		}
	}
	return out
}
