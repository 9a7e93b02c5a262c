package kubectlplugin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// stuckDeletedPV: a PV deleted two hours ago stays
// Terminating, held by the external-attacher's finalizer, because a
// VolumeAttachment still names it.
func stuckDeletedPV() []runtime.Object {
	p := pv("pvc-000", "fv-000", "node-1", "app", "data-000")
	p.DeletionTimestamp = ptr(ago(2 * time.Hour))
	p.Finalizers = []string{"external-attacher/filevol-csi-io"}
	p.Status.Phase = corev1.VolumeReleased
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-5f2a9c", Finalizers: []string{"external-attacher/filevol-csi-io"}},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: "node-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr("pvc-000")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
	return []runtime.Object{p, va,
		event("PersistentVolume", "", "pvc-000", "Warning", "VolumeFailedDelete", "persistentvolume pvc-000 is still attached to node node-1", 2*time.Hour)}
}

func TestDoctorSeed000TerminatingPVHeldByAttachment(t *testing.T) {
	out := run(t, nil, []string{"doctor"}, append(base(), stuckDeletedPV()...)...)
	mustContain(t, out,
		"ERROR   pv/pvc-000: stuck Terminating for 2h, held by finalizers external-attacher/filevol-csi-io",
		"cause: VolumeAttachment csi-5f2a9c still attaches it to node node-1 (attached: true); no pod uses it there any more; CSIDriver filevol.csi.io has attachRequired: false, so no csi-attacher will ever detach it",
		"fix:   kubectl delete volumeattachment csi-5f2a9c --wait=false; kubectl patch volumeattachment csi-5f2a9c --type=merge -p '{\"metadata\":{\"finalizers\":null}}'; then kubectl patch pv pvc-000 --type=json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers/0\"}]'",
		"1 problem found: 1 error, 0 warnings")
}

func TestDoctorTerminatingPVCauses(t *testing.T) {
	t.Run("attachment on a node that is gone", func(t *testing.T) {
		objs := stuckDeletedPV()
		objs[1].(*storagev1.VolumeAttachment).Spec.NodeName = "node-9"
		out := run(t, nil, []string{"doctor"}, append(base(), objs...)...)
		mustContain(t, out, "VolumeAttachment csi-5f2a9c still attaches it to node node-9 (attached: true), and node node-9 no longer exists: nothing will ever detach it")
	})
	t.Run("attachment held by a running pod", func(t *testing.T) {
		objs := append(stuckDeletedPV(), pvc("app", "data-000", "1Gi", "pvc-000"), pod("app", "db-0", "node-1", "data-000"))
		out := run(t, nil, []string{"doctor"}, append(base(), objs...)...)
		mustContain(t, out, "because pod app/db-0 uses it there", "fix:   delete pod app/db-0 first")
	})
	t.Run("attacher finalizer without attachment", func(t *testing.T) {
		out := run(t, nil, []string{"doctor"}, append(base(), stuckDeletedPV()[0])...)
		mustContain(t, out, "finalizer external-attacher/filevol-csi-io is left although no VolumeAttachment refers to the PV any more",
			"(CSIDriver filevol.csi.io has attachRequired: false, so none is deployed)")
	})
	t.Run("pv-protection while bound and used", func(t *testing.T) {
		p := pv("pvc-1", "fv-1", "node-1", "app", "data")
		p.DeletionTimestamp = ptr(ago(5 * time.Minute))
		out := run(t, nil, []string{"doctor"}, append(base(), p, pvc("app", "data", "1Gi", "pvc-1"), pod("app", "web", "node-1", "data"))...)
		mustContain(t, out, "pv/pvc-1: stuck Terminating for 5m",
			"cause: kubernetes.io/pv-protection: the PV is still Bound to PVC app/data, which pod app/web uses",
			"fix:   delete pod app/web, then the claim: kubectl delete pvc data -n app")
	})
	t.Run("provisioner refused to delete an in-use volume", func(t *testing.T) {
		p := pv("pvc-2", "fv-2", "node-1", "app", "gone")
		p.DeletionTimestamp = ptr(ago(10 * time.Minute))
		p.Finalizers = []string{finalizerProvisioner}
		p.Status.Phase = corev1.VolumeReleased
		ev := event("PersistentVolume", "", "pvc-2", "Warning", "VolumeFailedDelete",
			"rpc error: code = FailedPrecondition desc = volume fv-2 is in use: attached to /dev/loop3, mounted at /var/lib/kubelet/plugins/kubernetes.io/csi/filevol.csi.io/x/globalmount", time.Minute)
		out := run(t, nil, []string{"doctor"}, append(base(), p, ev)...)
		mustContain(t, out, "the provisioner could not delete the volume (1m ago): rpc error: code = FailedPrecondition",
			"fix:   the volume is still staged or mounted on node node-1: kubectl filevol describe pv/pvc-2 shows where")
	})
}

func TestDoctorReleasedPVNotDeleted(t *testing.T) {
	p := pv("pvc-rel", "fv-rel", "node-1", "app", "gone")
	p.Status.Phase = corev1.VolumeReleased
	p.Status.LastPhaseTransitionTime = ptr(ago(11 * time.Minute))
	out := run(t, nil, []string{"doctor"}, append(base(), p)...)
	mustContain(t, out, "WARNING pv/pvc-rel: Released for 11m and not deleted (reclaim policy Delete)",
		"cause: no provisioner has deleted it: csi-provisioner for node node-1 is not running",
		"fix:   check that csi-provisioner runs for filevol.csi.io on node node-1")
	ev := event("PersistentVolume", "", "pvc-rel", "Warning", "VolumeFailedDelete", "rpc error: code = FailedPrecondition desc = volume fv-rel is in use: attached to /dev/loop4", time.Minute)
	out = run(t, nil, []string{"doctor"}, append(base(), p, ev)...)
	mustContain(t, out, "ERROR   pv/pvc-rel: Released for 11m", "the provisioner could not delete the volume (1m ago): rpc error: code = FailedPrecondition",
		"fix:   the volume is still staged or mounted on node node-1")
}

func TestDoctorPendingPVCResourceExhausted(t *testing.T) {
	claim := pvc("app", "big", "100Gi", "")
	claim.Annotations = map[string]string{annSelectedNode: "node-1", "volume.kubernetes.io/storage-provisioner": driver}
	consumer := pod("app", "big-0", "", "big")
	consumer.Status = corev1.PodStatus{Phase: corev1.PodPending}
	capacity := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "csisc-1"},
		StorageClassName: "filevol", Capacity: ptr(resource.MustParse("4Gi")),
		NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{TopologyKey: "node-1"}}}
	ev := event("PersistentVolumeClaim", "app", "big", "Warning", "ProvisioningFailed",
		`failed to provision volume with StorageClass "filevol": rpc error: code = ResourceExhausted desc = RESOURCE_EXHAUSTED not enough space in the pool: 107374182400 bytes asked, 4294967296 available`, 30*time.Second)
	out := run(t, nil, []string{"doctor"}, append(base(), claim, consumer, capacity, ev)...)
	mustContain(t, out,
		"ERROR   pvc/big -n app: Pending for 1h (requests 100Gi)",
		"cause: node node-1's filevol pool cannot hold 100Gi: RESOURCE_EXHAUSTED (CSIStorageCapacity available: node-1/filevol: 4Gi)",
		"the provisioner's last event (ProvisioningFailed, 30s ago): failed to provision volume with StorageClass \"filevol\": rpc error: code = ResourceExhausted desc = RESOURCE_EXHAUSTED not enough space",
		"fix:   free space in node node-1's pool (delete PVCs or VolumeSnapshots that are no longer needed), request less, or delete pod app/big-0 so the scheduler picks a node with room")
}

// A claim restored from a snapshot whose restore size is larger than the
// claim's request stays Pending for ever; doctor names the cause.
func TestDoctorPendingPVCSmallerThanItsSnapshot(t *testing.T) {
	claim := pvc("app", "restored", "1Mi", "")
	claim.Annotations = map[string]string{"volume.kubernetes.io/storage-provisioner": driver}
	ev := event("PersistentVolumeClaim", "app", "restored", "Warning", "ProvisioningFailed",
		`failed to provision volume with StorageClass "filevol-xfs": error getting handle for DataSource Type VolumeSnapshot by Name snap: requested volume size 1048576 is less than the size 314572800 for the source snapshot snap`, time.Minute)
	out := run(t, nil, []string{"doctor"}, append(base(), claim, ev)...)
	mustContain(t, out,
		"ERROR   pvc/restored -n app: Pending for 1h (requests 1Mi)",
		"cause: the claim requests 1Mi but its source snapshot says it needs 314572800 bytes: external-provisioner refuses to restore a snapshot into a smaller claim",
		"fix:   recreate the claim requesting at least the snapshot's restoreSize (kubectl get volumesnapshot -n app -o wide)")
}

func TestDoctorPendingPVCOtherCauses(t *testing.T) {
	t.Run("selected node gone", func(t *testing.T) {
		claim := pvc("app", "c", "1Gi", "")
		claim.Annotations = map[string]string{annSelectedNode: "node-7"}
		out := run(t, nil, []string{"doctor"}, append(base(), claim)...)
		mustContain(t, out, "the scheduler chose node node-7 for it, and node node-7 no longer exists",
			"kubectl annotate pvc c -n app volume.kubernetes.io/selected-node-")
	})
	t.Run("consumer unschedulable for lack of storage", func(t *testing.T) {
		claim := pvc("app", "c", "1Ti", "")
		consumer := pod("app", "c-0", "", "c")
		consumer.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 node(s) did not have enough free storage."}}}
		out := run(t, nil, []string{"doctor"}, append(base(), claim, consumer)...)
		mustContain(t, out, "cause: pod app/c-0 that uses it cannot be scheduled: 0/1 nodes are available: 1 node(s) did not have enough free storage.",
			"fix:   free space on a node, request less")
	})
	t.Run("no provisioner answers", func(t *testing.T) {
		claim := pvc("app", "c", "1Gi", "")
		claim.Annotations = map[string]string{annSelectedNode: "node-1"}
		consumer := pod("app", "c-0", "node-1", "c")
		consumer.Status = corev1.PodStatus{Phase: corev1.PodPending}
		ev := event("PersistentVolumeClaim", "app", "c", "Normal", "ExternalProvisioning",
			"Waiting for a volume to be created either by the external provisioner 'filevol.csi.io' or manually by the system administrator.", time.Minute)
		out := run(t, nil, []string{"doctor"}, append(base(), claim, consumer, ev)...)
		mustContain(t, out, "cause: no provisioner has answered for it (last event: ExternalProvisioning: Waiting for a volume",
			"fix:   check that csi-provisioner runs for filevol.csi.io on node node-1")
	})
	t.Run("waiting for a first consumer is no problem", func(t *testing.T) {
		out := run(t, nil, []string{"doctor"}, append(base(), pvc("app", "later", "1Gi", ""))...)
		mustContain(t, out, "No problems found")
	})
}

// stuckOnMissingImage is a pod in ContainerCreating, because the
// volume's image file was removed from the pool.
func stuckOnMissingImage() []runtime.Object {
	return []runtime.Object{
		pv("pvc-web", "fv-web", "node-1", "app", "web-data"),
		pvc("app", "web-data", "1Gi", "pvc-web"),
		creatingPod("app", "web-0", "node-1", "web-data"),
		event("Pod", "app", "web-0", "Warning", "FailedMount",
			`MountVolume.MountDevice failed for volume "pvc-web" : rpc error: code = FailedPrecondition desc = image file /var/lib/filevol/pool/volumes/fv-web.img of volume fv-web is missing`, 20*time.Second),
	}
}

func TestDoctorPodStuckContainerCreating(t *testing.T) {
	views := fakeViewer{"node-1": {Node: "node-1", Volumes: []api.Volume{{Record: api.Record{ID: "fv-web"}, State: api.StateIdle,
		Health: []api.Condition{{Status: "DATA_LOSS", Reason: "ImageMissing", Message: "image file /var/lib/filevol/pool/volumes/fv-web.img is missing from the pool"}}}}}}
	out := run(t, views, []string{"doctor"}, append(base(), stuckOnMissingImage()...)...)
	mustContain(t, out,
		"ERROR   pod/web-0 -n app: stuck in ContainerCreating for 10m on node node-1, waiting for volume web-data",
		"cause: the volume's image file is gone from node node-1's pool (removed by hand, or lost with the disk)",
		"kubelet on node node-1 (FailedMount, 20s ago): MountVolume.MountDevice failed for volume \"pvc-web\" : rpc error: code = FailedPrecondition desc = image file /var/lib/filevol/pool/volumes/fv-web.img of volume fv-web is missing",
		"the driver on node-1 reports pvc-web: ImageMissing (image file /var/lib/filevol/pool/volumes/fv-web.img is missing from the pool)",
		"fix:   the data cannot be mounted: restore a VolumeSnapshot into a new PVC",
		"1 problem found")
	// The abnormal volume is told once, with its pod, not again as a PV finding.
	if strings.Contains(out, "pv/pvc-web") {
		t.Errorf("the stuck pod's volume was reported twice:\n%s", out)
	}
}

func TestDoctorCapacityAndGoneNode(t *testing.T) {
	full := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "csisc-1"},
		StorageClassName: "filevol", Capacity: ptr(resource.MustParse("0")),
		NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{TopologyKey: "node-1"}}}
	lost := pv("pvc-lost", "fv-lost", "node-3", "app", "old")
	views := fakeViewer{"node-1": {Node: "node-1", Pool: api.Pool{TotalBytes: 10 << 30, FreeBytes: 1 << 30, ReservedBytes: 1 << 30, ProvisionedBytes: 40 << 30}}}
	out := run(t, views, []string{"doctor"}, append(base(), full, lost, pvc("app", "old", "1Gi", "pvc-lost"))...)
	mustContain(t, out,
		"ERROR   pv/pvc-lost: its node node-3 no longer exists (claim app/old)",
		"fix:   bring node node-3 back (same --node-id) and the volume comes back with it; or give up its data: kubectl delete pvc old -n app",
		"WARNING node/node-1: no room for new filevol volumes",
		"cause: CSIStorageCapacity reports 0 bytes available on node node-1 for StorageClass filevol: its pool is full, or --reserved-capacity takes the rest; the driver sees 1Gi free of 10Gi, 1Gi reserved, 40Gi promised to volumes")
}

func TestDoctorDriverPodsAndRegistration(t *testing.T) {
	dp := pod("kube-system", "filevol-node-abcde", "node-1", "")
	dp.Labels = map[string]string{"app.kubernetes.io/name": "filevol"}
	dp.Spec.Volumes = nil
	dp.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "filevol", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "csi-provisioner", RestartCount: 7,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}},
	}
	objs := []runtime.Object{csiDriver(), storageClass(), node("node-1"), // no CSINode entry for the driver
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		dp, pv("pvc-1", "fv-1", "node-1", "app", "data")}
	out := run(t, nil, []string{"doctor"}, objs...)
	mustContain(t, out,
		"ERROR   pod/filevol-node-abcde -n kube-system: driver pod not ready on node node-1",
		"cause: container csi-provisioner: waiting, CrashLoopBackOff (back-off 5m0s restarting failed container), restarted 7 times, last exit: Error (code 1)",
		"fix:   kubectl logs -n kube-system filevol-node-abcde -c <container> --previous",
		"ERROR   node/node-1: filevol.csi.io is not registered with kubelet")
}

func TestDoctorCSIDriverMissing(t *testing.T) {
	out := run(t, nil, []string{"doctor"}, storageClass(), node("node-1"))
	mustContain(t, out, "ERROR   csidriver/filevol.csi.io: not found", "fix:   install filevol (charts/filevol), or pass --driver")
}

func TestDoctorDriverReports(t *testing.T) {
	p := pv("pvc-ro", "fv-ro", "node-1", "app", "ro")
	t.Run("from events when the node view is unavailable", func(t *testing.T) {
		objs := append(base(), p,
			event("PersistentVolume", "", "pvc-ro", "Warning", reasonVolumeAbnormal, "volume fv-ro (PVC app/ro): FilesystemReadOnly (DEGRADED): remounted read-only", 3*time.Minute),
			event("Node", "", "node-1", "Warning", reasonOrphanQuarantined, "image /pool/quarantine/fv-x.img without a volume record: moved aside", time.Hour),
			event("Node", "", "node-1", "Warning", reasonPoolNearlyFull, "filevol pool /pool has 3% free", 2*time.Minute))
		out := run(t, nil, []string{"doctor"}, objs...)
		mustContain(t, out,
			"ERROR   pv/pvc-ro: the driver on node node-1 reports the volume abnormal",
			"cause: the driver's event (3m ago): volume fv-ro (PVC app/ro): FilesystemReadOnly (DEGRADED): remounted read-only",
			"fix:   the kernel remounted the filesystem read-only after I/O errors",
			"WARNING node/node-1: the driver quarantined orphaned image files",
			"WARNING node/node-1: filevol pool nearly full")
	})
	t.Run("recovered volumes and pools are quiet", func(t *testing.T) {
		objs := append(base(), p,
			event("PersistentVolume", "", "pvc-ro", "Warning", reasonVolumeAbnormal, "x", 3*time.Minute),
			event("PersistentVolume", "", "pvc-ro", "Normal", reasonVolumeNormal, "y", time.Minute),
			event("Node", "", "node-1", "Warning", reasonPoolNearlyFull, "x", 3*time.Minute),
			event("Node", "", "node-1", "Normal", reasonPoolSpaceOK, "y", time.Minute))
		out := run(t, nil, []string{"doctor"}, objs...)
		mustContain(t, out, "No problems found (1 filevol.csi.io volume, 1 node checked).")
	})
	t.Run("from the node view", func(t *testing.T) {
		views := fakeViewer{"node-1": {Node: "node-1", PoolDir: "/var/lib/filevol/pool", Quarantine: []string{"fv-9-20261122T110000.000000000Z.img"},
			Volumes: []api.Volume{{Record: api.Record{ID: "fv-ro"}, Health: []api.Condition{{Status: "INACCESSIBLE", Reason: "LoopDeviceGone", Message: "loop device gone"}}}}}}
		out := run(t, views, []string{"doctor"}, append(base(), p)...)
		mustContain(t, out,
			"cause: LoopDeviceGone (INACCESSIBLE): loop device gone",
			"fix:   the pod's device was detached underneath it: delete the pod",
			"cause: 1 image(s) without a volume record in /var/lib/filevol/pool/quarantine: fv-9-20261122T110000.000000000Z.img")
	})
	t.Run("a repaired quota escape", func(t *testing.T) {
		// Directory volumes are in the view only with a condition.
		views := fakeViewer{"node-1": {Node: "node-1", PoolDir: "/var/lib/filevol/pool",
			DirVolumes: []api.Volume{{Record: api.Record{ID: "fv-ro"}, Health: []api.Condition{{Status: "DEGRADED", Reason: "QuotaEscapeRepaired",
				Message: "a process in the pod made a btrfs subvolume outside the volume's quota 1 time(s); the latest, at esc"}}}}}}
		out := run(t, views, []string{"doctor"}, append(base(), p)...)
		mustContain(t, out,
			"ERROR   pv/pvc-ro: the driver on node node-1 reports the volume abnormal",
			"cause: QuotaEscapeRepaired (DEGRADED): a process in the pod made a btrfs subvolume outside the volume's quota 1 time(s); the latest, at esc",
			"fix:   a process in the pod made a btrfs subvolume outside its volume's quota; filevol put it back",
			"seccomp profile (docs/security.md)")
	})
}

func TestDoctorHealthyAndJSON(t *testing.T) {
	objs := append(base(), pv("pvc-1", "fv-1", "node-1", "app", "data"), pvc("app", "data", "1Gi", "pvc-1"), pod("app", "web", "node-1", "data"))
	mustContain(t, run(t, nil, []string{"doctor"}, objs...), "No problems found (1 filevol.csi.io volume, 1 node checked).")
	var fs []Finding
	if err := json.Unmarshal([]byte(run(t, nil, []string{"doctor", "-o", "json"}, append(base(), stuckDeletedPV()...)...)), &fs); err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Kind != "PersistentVolume" || fs[0].Name != "pvc-000" || fs[0].Severity != SevError || !strings.Contains(fs[0].Cause, "csi-5f2a9c") {
		t.Errorf("doctor -o json = %+v", fs)
	}
}

// TestDoctorGolden runs every situation at once and compares the whole
// report with testdata/doctor.golden.
func TestDoctorGolden(t *testing.T) {
	claim := pvc("app", "big", "100Gi", "")
	claim.Annotations = map[string]string{annSelectedNode: "node-1"}
	objs := append(base(), stuckDeletedPV()...)
	objs = append(objs, stuckOnMissingImage()...)
	objs = append(objs, claim, event("PersistentVolumeClaim", "app", "big", "Warning", "ProvisioningFailed",
		`failed to provision volume with StorageClass "filevol": rpc error: code = ResourceExhausted desc = RESOURCE_EXHAUSTED not enough space in the pool`, time.Minute))
	golden(t, "doctor.golden", run(t, nil, []string{"doctor"}, objs...))
}

// A directory volume whose size is not enforced (a pool without quota)
// is named, with the note the driver put in its volume context; one whose
// size is enforced is not.
func TestDoctorUnenforcedSize(t *testing.T) {
	loose := pv("pvc-loose", "fv1-dir-00000001-00", "node-1", "app", "shared")
	loose.Spec.CSI.VolumeAttributes = map[string]string{contextSizeEnforced: "false",
		contextSizeNote: "size NOT enforced: 1073741824 bytes is the claim's size only"}
	tight := pv("pvc-tight", "fv1-dir-00000001-01", "node-1", "app", "quota")
	tight.Spec.CSI.VolumeAttributes = map[string]string{contextSizeEnforced: "true"}
	out := run(t, nil, []string{"doctor"}, append(base(), loose, tight)...)
	mustContain(t, out, "WARNING pv/pvc-loose: size 1Gi NOT enforced (claim app/shared): its directory pool has no quota",
		"cause: size NOT enforced: 1073741824 bytes is the claim's size only",
		"allowUnenforcedSize")
	if strings.Contains(out, "pv/pvc-tight") {
		t.Errorf("a volume whose size is enforced was reported:\n%s", out)
	}
}

// A node that stopped answering: its volume is unreachable, the claim is
// pinned to it, and the pod that uses it waits; the volume cannot move.
func TestDoctorDownNode(t *testing.T) {
	down := node("node-2")
	down.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}}
	objs := append(base(), down, csiNode("node-2"), pv("pvc-here", "fv-here", "node-2", "app", "data"),
		pvc("app", "data", "1Gi", "pvc-here"), pod("app", "web", "node-2", "data"))
	out := run(t, nil, []string{"doctor"}, objs...)
	mustContain(t, out,
		"ERROR   pv/pvc-here: unreachable: its node node-2 is NotReady (claim app/data is pinned to it)",
		"cause: node node-2 is NotReady (NodeStatusUnknown): its kubelet and filevol do not answer, and the volume lives in that node's pool, which no other node can reach; a node-local volume cannot move; pods app/web wait for it",
		"fix:   bring node node-2 back: the volume and its data come back with it, and its pods run again there")
	// A Ready node's volume is no finding.
	out = run(t, nil, []string{"doctor"}, append(base(), node("node-2"), csiNode("node-2"), pv("pvc-here", "fv-here", "node-2", "app", "data"),
		pvc("app", "data", "1Gi", "pvc-here"))...)
	if strings.Contains(out, "unreachable") {
		t.Errorf("a Ready node's volume reported unreachable:\n%s", out)
	}
}

func TestDoctorVolumesWithoutPV(t *testing.T) {
	vol := func(id string, made time.Duration, pv string) api.Volume {
		return api.Volume{Record: api.Record{ID: id, CapacityBytes: 64 << 20, CreatedAt: now.Add(-made)}, PV: pv,
			PVCNamespace: "app", PVCName: "old", State: api.StateIdle}
	}
	shared := vol("fv-shared", time.Hour, "")
	views := fakeViewer{
		"node-1": {Node: "node-1", Volumes: []api.Volume{vol("fv-1", time.Hour, "pvc-1"), vol("fv-kept", 2*time.Hour, "pvc-gone"), vol("fv-new", 10*time.Second, "pvc-new"), shared}},
		"node-2": {Node: "node-2", Volumes: []api.Volume{shared}},
	}
	objs := append(base(), node("node-2"), csiNode("node-2"), pv("pvc-1", "fv-1", "node-1", "app", "data"), pvc("app", "data", "1Gi", "pvc-1"))
	out := run(t, views, []string{"doctor"}, objs...)
	mustContain(t, out,
		"WARNING node/node-1: 2 volumes in the pool that no PersistentVolume names",
		"cause: volume fv-kept (64Mi, made 2h ago, for PV pvc-gone of claim app/old, idle)",
		"volume fv-shared (64Mi, made 1h ago of claim app/old, idle)",
		"spec.csi.volumeHandle fv-kept, fv-shared (node affinity "+TopologyKey+"=node-1",
		"persistentVolumeReclaimPolicy: Delete and a claimRef to a claim that no longer exists")
	for _, quiet := range []string{"fv-1 ", "fv-new", "node/node-2"} {
		if strings.Contains(out, quiet) {
			t.Errorf("doctor names %q (a volume with its PV, one younger than --min-age, or a shared volume twice):\n%s", quiet, out)
		}
	}
}
