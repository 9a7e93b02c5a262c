//go:build e2e

package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/filevol/filevol/internal/nodeview/api"
)

const (
	driver            = "filevol.csi.io"
	attacherFinalizer = "external-attacher/filevol-csi-io"
	topologyKey       = "topology.filevol.csi.io/node"
)

// A PV stays Terminating for as long as a VolumeAttachment
// names it, because the external-attacher's finalizer holds it. filevol
// needs no attacher (attachRequired: false), so the attachment here is
// made by hand, as a leftover from an attacher would be.
func TestDoctorNamesWhatHoldsATerminatingPV(t *testing.T) {
	ns := namespace(t)
	claim(t, ns, "data", "64Mi")
	pv := writeOnce(t, ns, "data")
	node := pvNode(pv)

	va, err := cs.StorageV1().VolumeAttachments().Create(t.Context(), &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csi-doctor-", Finalizers: []string{attacherFinalizer}},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv.Name}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VolumeAttachment: %v", err)
	}
	va.Status.Attached = true
	if _, err := cs.StorageV1().VolumeAttachments().UpdateStatus(t.Context(), va, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("VolumeAttachment status: %v", err)
	}
	addFinalizer := fmt.Sprintf(`[{"op":"add","path":"/metadata/finalizers/-","value":%q}]`, attacherFinalizer)
	if _, err := cs.CoreV1().PersistentVolumes().Patch(t.Context(), pv.Name, "application/json-patch+json", []byte(addFinalizer), metav1.PatchOptions{}); err != nil {
		t.Fatalf("add the attacher's finalizer to %s: %v", pv.Name, err)
	}
	t.Cleanup(func() { release(pv.Name, va.Name) })

	// As users do: the claim goes, then somebody deletes the PV.
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "claim gone", func() (bool, error) {
		_, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "data", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err := cs.CoreV1().PersistentVolumes().Delete(t.Context(), pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	doctorSays(t, time.Minute,
		"pv/"+pv.Name+": stuck Terminating",
		attacherFinalizer,
		"VolumeAttachment "+va.Name+" still attaches it to node "+node,
		"kubectl patch volumeattachment "+va.Name)
}

// release undoes what held the PV and waits until it is gone.
func release(pv, va string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dropFinalizers(ctx, func(ctx context.Context, b []byte) error {
		_, err := cs.StorageV1().VolumeAttachments().Patch(ctx, va, mergePatch, b, metav1.PatchOptions{})
		return err
	})
	_ = cs.StorageV1().VolumeAttachments().Delete(ctx, va, metav1.DeleteOptions{})
	if p, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{}); err == nil {
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == attacherFinalizer })
		_, _ = cs.CoreV1().PersistentVolumes().Update(ctx, p, metav1.UpdateOptions{})
	}
	_ = poll(ctx, func() (bool, error) {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// A claim larger than any node's pool stays Pending: doctor names the
// capacity (CSIStorageCapacity keeps the scheduler off full nodes) or the
// provisioner's RESOURCE_EXHAUSTED, whichever the cluster got to.
func TestDoctorNamesAFullPool(t *testing.T) {
	ns := namespace(t)
	claim(t, ns, "huge", "1Pi")
	newPod(t, ns, "user", "huge", "true")
	out := doctorSays(t, 2*time.Minute, "pvc/huge -n "+ns+": Pending")
	if !strings.Contains(out, "RESOURCE_EXHAUSTED") && !strings.Contains(out, "enough free storage") {
		t.Errorf("doctor does not say the pool is full:\n%s", out)
	}
}

// A pod stays in ContainerCreating when its volume's image file was
// removed from the pool behind the driver's back:
// doctor names the missing file.
func TestDoctorNamesAMissingImageFile(t *testing.T) {
	if poolDir == "" {
		t.Skip("FILEVOL_E2E_POOL not set: cannot remove an image file")
	}
	ns := namespace(t)
	claim(t, ns, "data", "64Mi")
	pv := writeOnce(t, ns, "data")
	id := pv.Spec.CSI.VolumeHandle
	eventually(t, 2*time.Minute, "volume "+id+" unstaged", func() (bool, error) {
		v, err := driverView(t.Context(), id)
		return err == nil && v.State == api.StateIdle, err
	})
	img := filepath.Join(poolDir, "volumes", id+".img")
	aside := img + ".doctor-e2e"
	if err := os.Rename(img, aside); err != nil {
		t.Fatalf("move the image away: %v", err)
	}
	t.Cleanup(func() { _ = os.Rename(aside, img) }) // before the namespace goes: its delete then succeeds

	newPod(t, ns, "reader", "data", "cat /data/hello")
	doctorSays(t, 2*time.Minute,
		"pod/reader -n "+ns+": stuck in ContainerCreating",
		"the volume's image file is gone from node",
		id)
}

var errUnknownVolume = errors.New("no such volume")

// driverView asks the driver's /debug/volumes for one volume.
func driverView(ctx context.Context, id string) (*api.Volume, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, driverURL+api.Path+"?"+api.QueryVolume+"="+id, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r api.Report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if len(r.Volumes) != 1 {
		return nil, fmt.Errorf("%w: driver at %s does not know volume %s", errUnknownVolume, driverURL, id)
	}
	return &r.Volumes[0], nil
}

func pvNode(pv *corev1.PersistentVolume) string {
	if a := pv.Spec.NodeAffinity; a != nil && a.Required != nil {
		for _, term := range a.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == topologyKey && len(e.Values) > 0 {
					return e.Values[0]
				}
			}
		}
	}
	return ""
}
