package kubectlplugin

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// dataUpload is velero's DataUpload of claim app/db's snapshot for backup
// nightly, as the CSI PVC action writes it, in phase, created d ago.
func dataUpload(name, phase string, d time.Duration) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "velero.io/v2alpha1", "kind": "DataUpload",
		"metadata": map[string]any{"namespace": "velero", "name": name,
			"labels":            map[string]any{"velero.io/backup-name": "nightly"},
			"creationTimestamp": ago(d).UTC().Format(time.RFC3339)},
		"spec": map[string]any{"snapshotType": "CSI", "sourcePVC": "db", "sourceNamespace": "app",
			"csiSnapshot": map[string]any{"volumeSnapshot": "velero-db-abc12", "storageClass": "filevol"}},
		"status": map[string]any{"phase": phase},
	}}
	return u
}

// dataDownload is velero's DataDownload into claim app/db for restore
// nightly-restore.
func dataDownload(name, phase string, d time.Duration) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "velero.io/v2alpha1", "kind": "DataDownload",
		"metadata": map[string]any{"namespace": "velero", "name": name,
			"labels":            map[string]any{"velero.io/restore-name": "nightly-restore"},
			"creationTimestamp": ago(d).UTC().Format(time.RFC3339)},
		"spec":   map[string]any{"targetVolume": map[string]any{"pvc": "db", "namespace": "app"}},
		"status": map[string]any{"phase": phase},
	}}
}

// moverClaim is the data mover's claim (named like its DataUpload or
// DataDownload), Pending, and its pod.
func moverClaim(kind, name string) (*corev1.PersistentVolumeClaim, *corev1.Pod) {
	c := pvc("velero", name, "1Gi", "")
	c.CreationTimestamp = ago(12 * time.Minute)
	p := pod("velero", name, "", name)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "velero.io/v2alpha1", Kind: kind, Name: name, Controller: ptr(true)}}
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	return c, p
}

// provisioningFailed is a data mover's claim, placed on node, that the
// provisioner failed with err a minute ago, and its pod.
func provisioningFailed(kind, name, node, err string) []runtime.Object {
	claim, mover := moverClaim(kind, name)
	claim.Annotations = map[string]string{annSelectedNode: node}
	ev := event("PersistentVolumeClaim", "velero", name, "Warning", "ProvisioningFailed",
		`failed to provision volume with StorageClass "filevol": `+err, time.Minute)
	return []runtime.Object{claim, mover, ev}
}

func dynamicClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{dataUploads: "DataUploadList", dataDownloads: "DataDownloadList"}, objs...)
}

// runDoctor runs doctor with velero's objects served by dyn; it returns
// standard output and standard error.
func runDoctor(t *testing.T, dyn *dynamicfake.FakeDynamicClient, objs ...runtime.Object) (string, string) {
	t.Helper()
	env, o := testEnv(objs...)
	env.Dynamic = dyn
	return runIn(t, env, o, []string{"doctor"})
}

func TestDoctorDataUploadWaitsOnAFullNode(t *testing.T) {
	claim, mover := moverClaim("DataUpload", "nightly-7k2q")
	mover.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 node(s) did not have enough free storage."}}
	full := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "csisc-1"},
		StorageClassName: "filevol", Capacity: ptr(resource.MustParse("0")),
		NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{TopologyKey: "node-1"}}}
	out, _ := runDoctor(t, dynamicClient(dataUpload("nightly-7k2q", "Accepted", 12*time.Minute)),
		append(base(), claim, mover, full)...)
	mustContain(t, out,
		"ERROR   dataupload/nightly-7k2q -n velero: backup nightly does not move: Accepted for 12m, its claim velero/nightly-7k2q is Pending",
		"cause: velero restores VolumeSnapshot velero-db-abc12 of claim app/db into claim velero/nightly-7k2q (StorageClass filevol) for its data-mover pod to read; "+
			"the claim: pod velero/nightly-7k2q that uses it cannot be scheduled: 0/1 nodes are available: 1 node(s) did not have enough free storage. (CSIStorageCapacity available: node-1/filevol: 0)",
		"fix:   free space on a node, request less, or add nodes with a filevol pool",
		"the DataUpload goes on by itself once the claim is bound; velero fails it after the node-agent's --data-mover-prepare-timeout (30m by default): then run the backup again",
		// The claim itself is named too, by the Pending claims' check.
		"ERROR   pvc/nightly-7k2q -n velero: Pending for 12m (requests 1Gi)")
}

func TestDoctorDataUploadOnANodeWithoutTheSnapshot(t *testing.T) {
	failed := provisioningFailed("DataUpload", "nightly-9x1z", "node-2",
		`rpc error: code = NotFound desc = snapshot "fv1-snap-0123" is not in the pool of node node-2: filevol snapshots are node-local, restore it on the node that took it`)
	out, _ := runDoctor(t, dynamicClient(dataUpload("nightly-9x1z", "Accepted", 12*time.Minute)),
		append(append(base(), node("node-2"), csiNode("node-2")), failed...)...)
	mustContain(t, out,
		"ERROR   dataupload/nightly-9x1z -n velero: backup nightly does not move: Accepted for 12m, its claim velero/nightly-9x1z is Pending",
		"is not in the pool of node node-2: filevol snapshots are node-local",
		"fix:   give the backup claim a WaitForFirstConsumer filevol.csi.io StorageClass (the node-agent's backupPVC configuration maps StorageClass filevol to it, or leave it unmapped): velero then starts the data mover on the node of the source volume, whose pool holds the snapshot")
}

func TestDoctorDataDownloadNoRoom(t *testing.T) {
	failed := provisioningFailed("DataDownload", "nightly-restore-5m8p", "node-1",
		`rpc error: code = ResourceExhausted desc = RESOURCE_EXHAUSTED not enough space in the pool: 1073741824 bytes asked, 0 available`)
	out, _ := runDoctor(t, dynamicClient(dataDownload("nightly-restore-5m8p", "Accepted", 3*time.Minute)),
		append(base(), failed...)...)
	mustContain(t, out,
		"ERROR   datadownload/nightly-restore-5m8p -n velero: restore nightly-restore does not move: Accepted for 3m, its claim velero/nightly-restore-5m8p is Pending",
		"cause: velero restores the data of claim app/db into claim velero/nightly-restore-5m8p (StorageClass filevol), written by its data-mover pod, before it hands the volume to app/db; "+
			"the claim: node node-1's filevol pool cannot hold 1Gi: RESOURCE_EXHAUSTED",
		"fix:   free space in node node-1's pool",
		"request less, or kubectl annotate pvc nightly-restore-5m8p -n velero volume.kubernetes.io/selected-node- so the scheduler picks a node with room",
		"then run the restore again")
}

// TestDoctorDataMoversLeftAlone: data movers that move, are done, or wait
// on a claim that is bound or not filevol's are not named; nor is a cluster
// without velero, and a list velero's resources refuse is a note.
func TestDoctorDataMoversLeftAlone(t *testing.T) {
	bound := pvc("velero", "moving", "1Gi", "pvc-moving")
	other, otherPod := moverClaim("DataUpload", "other-class")
	other.Spec.StorageClassName = ptr("someone-else")
	notOurs := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}, Provisioner: "ebs.csi.aws.com"}
	done, donePod := moverClaim("DataUpload", "done")
	objs := append(base(), bound, other, otherPod, notOurs, done, donePod)
	dyn := dynamicClient(dataUpload("moving", "Prepared", time.Hour), dataUpload("other-class", "Accepted", time.Hour),
		dataUpload("done", "Completed", time.Hour), dataDownload("inprogress", "InProgress", time.Hour))
	out, _ := runDoctor(t, dyn, objs...)
	for _, name := range []string{"dataupload/", "datadownload/"} {
		if strings.Contains(out, name) {
			t.Errorf("doctor named a data mover that is not stuck on filevol:\n%s", out)
		}
	}
	// The claim of the Completed DataUpload is still a Pending filevol claim.
	mustContain(t, out, "ERROR   pvc/done -n velero: Pending for 12m")

	noVelero := dynamicClient()
	noVelero.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(dataUploads.GroupResource(), "")
	})
	if _, errOut := runDoctor(t, noVelero, base()...); errOut != "" {
		t.Errorf("a cluster without velero got notes: %q", errOut)
	}
	forbidden := dynamicClient()
	forbidden.PrependReactor("list", "datauploads", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(dataUploads.GroupResource(), "", nil)
	})
	_, errOut := runDoctor(t, forbidden, base()...)
	mustContain(t, errOut, "note: could not list velero datauploads: datauploads.velero.io is forbidden")
}
