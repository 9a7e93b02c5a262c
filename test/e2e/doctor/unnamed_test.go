//go:build e2e

package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A volume kept by the Retain policy outlives its PV: the claim goes, an
// operator deletes the Released PV, and the volume stays in the pool with
// its data, which no claim can reach. doctor names it, and the PV its fix
// describes (Delete policy, a claimRef to the gone claim) has the
// provisioner delete it.
func TestDoctorNamesAVolumeWithoutPV(t *testing.T) {
	ns := namespace(t)
	claim(t, ns, "data", "64Mi")
	pv := writeOnce(t, ns, "data")
	id, node := pv.Spec.CSI.VolumeHandle, pvNode(pv)
	retain := []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`)
	if _, err := cs.CoreV1().PersistentVolumes().Patch(t.Context(), pv.Name, mergePatch, retain, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reclaim := reclaimingPV(pv, c)
	t.Cleanup(func() { deleteThroughPV(t, reclaim) }) // whatever the story reached: the volume goes
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "PV "+pv.Name+" Released", func() (bool, error) {
		p, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.VolumeReleased, err
	})
	if err := cs.CoreV1().PersistentVolumes().Delete(t.Context(), pv.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "PV "+pv.Name+" gone", func() (bool, error) {
		_, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if _, err := driverView(t.Context(), id); err != nil {
		t.Fatalf("the retained volume is not in the pool: %v", err)
	}
	doctorSays(t, time.Minute,
		"node/"+node+": 1 volume in the pool that no PersistentVolume names",
		"volume "+id+" (64Mi",
		"for PV "+pv.Name+" of claim "+ns+"/data",
		"spec.csi.volumeHandle "+id)

	deleteThroughPV(t, reclaim)
	if out := doctor(t); strings.Contains(out, id) {
		t.Errorf("doctor still names %s after its delete:\n%s", id, out)
	}
}

// reclaimingPV is the PV doctor's fix describes to have a volume deleted:
// the old PV's volume, Delete policy, bound to the claim that is gone.
func reclaimingPV(old *corev1.PersistentVolume, c *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	p := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: old.Name,
		Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": driver}},
		Spec: *old.Spec.DeepCopy()}
	p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
	p.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
		Namespace: c.Namespace, Name: c.Name, UID: c.UID}
	return p
}

// deleteThroughPV creates p (unless it exists) and waits until the
// provisioner has deleted it and its volume.
func deleteThroughPV(t *testing.T, p *corev1.PersistentVolume) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := p.Spec.CSI.VolumeHandle
	if _, err := driverView(ctx, id); errors.Is(err, errUnknownVolume) {
		return // gone already
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("create PV %s to delete volume %s: %v", p.Name, id, err)
		return
	}
	err := poll(ctx, func() (bool, error) {
		if _, err := cs.CoreV1().PersistentVolumes().Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		_, err := driverView(ctx, id)
		return errors.Is(err, errUnknownVolume), nil
	})
	if err != nil {
		got, _ := cs.CoreV1().PersistentVolumes().Get(ctx, p.Name, metav1.GetOptions{})
		b, _ := json.Marshal(got)
		t.Errorf("volume %s not deleted through PV %s: %v\n%s", id, p.Name, err, b)
	}
}
