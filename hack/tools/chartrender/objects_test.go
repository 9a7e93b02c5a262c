package chartrender

import (
	"slices"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
)

func TestCSIDriver(t *testing.T) {
	r := render(t, "")
	o := r.Find("CSIDriver", "filevol.csi.io")
	if o == nil {
		t.Fatal("no CSIDriver filevol.csi.io")
	}
	d := o.Typed.(*storagev1.CSIDriver).Spec
	if d.AttachRequired == nil || *d.AttachRequired {
		t.Error("attachRequired is not false")
	}
	if d.PodInfoOnMount == nil || !*d.PodInfoOnMount {
		t.Error("podInfoOnMount is not true")
	}
	if d.FSGroupPolicy == nil || *d.FSGroupPolicy != storagev1.FileFSGroupPolicy {
		t.Errorf("fsGroupPolicy %v", d.FSGroupPolicy)
	}
	if d.StorageCapacity == nil || !*d.StorageCapacity {
		t.Error("storageCapacity is not true")
	}
	if !slices.Equal(d.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}) {
		t.Errorf("volumeLifecycleModes %v", d.VolumeLifecycleModes)
	}
	if d.RequiresRepublish == nil || *d.RequiresRepublish || d.SELinuxMount == nil || *d.SELinuxMount {
		t.Error("requiresRepublish and seLinuxMount must be false")
	}
	if r2 := render(t, "driverName: local.example.com\n"); r2.Find("CSIDriver", "local.example.com") == nil ||
		!strings.Contains(r2.Manifest, "/var/lib/kubelet/plugins/local.example.com/csi.sock") {
		t.Error("driverName does not name the CSIDriver and the socket directory")
	}
}

func TestStorageClasses(t *testing.T) {
	r := render(t, `
storageClasses:
  - name: filevol
  - name: fast-xfs
    default: true
    fsType: xfs
    provisioning: thick
    reclaimPolicy: Retain
    allowVolumeExpansion: false
    volumeBindingMode: Immediate
    mountOptions: [noatime]
    labels: {tier: fast}
    annotations: {note: x}
`)
	if n := r.Kinds()["StorageClass"]; n != 2 {
		t.Fatalf("%d StorageClasses", n)
	}
	def := r.Find("StorageClass", "filevol").Typed.(*storagev1.StorageClass)
	if def.Provisioner != "filevol.csi.io" || def.Parameters["csi.storage.k8s.io/fstype"] != "ext4" || def.Parameters["provisioning"] != "thin" ||
		*def.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || !*def.AllowVolumeExpansion ||
		string(*def.ReclaimPolicy) != "Delete" || len(def.Annotations) != 0 || len(def.Parameters) != 2 {
		t.Errorf("defaults of a class: %+v", def)
	}
	x := r.Find("StorageClass", "fast-xfs").Typed.(*storagev1.StorageClass)
	if x.Parameters["csi.storage.k8s.io/fstype"] != "xfs" || x.Parameters["provisioning"] != "thick" ||
		*x.VolumeBindingMode != storagev1.VolumeBindingImmediate || *x.AllowVolumeExpansion ||
		string(*x.ReclaimPolicy) != "Retain" || !slices.Equal(x.MountOptions, []string{"noatime"}) ||
		x.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" || x.Annotations["note"] != "x" || x.Labels["tier"] != "fast" {
		t.Errorf("explicit class: %+v", x)
	}
	if n := render(t, "storageClasses: []\n").Kinds()["StorageClass"]; n != 0 {
		t.Errorf("%d StorageClasses with storageClasses: []", n)
	}
}

func TestVolumeSnapshotClass(t *testing.T) {
	r := render(t, "snapshots: {volumeSnapshotClass: {name: snap, default: true, deletionPolicy: Retain}}\n")
	o := r.Find("VolumeSnapshotClass", "snap")
	if o == nil {
		t.Fatalf("no VolumeSnapshotClass snap; kinds %v", r.Kinds())
	}
	md := o.Map["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if o.APIVersion != "snapshot.storage.k8s.io/v1" || o.Map["driver"] != "filevol.csi.io" || o.Map["deletionPolicy"] != "Retain" ||
		ann["snapshot.storage.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("VolumeSnapshotClass %v", o.Map)
	}
	if render(t, "snapshots: {volumeSnapshotClass: {create: false}}\n").Kinds()["VolumeSnapshotClass"] != 0 {
		t.Error("VolumeSnapshotClass rendered with create=false")
	}
}

// TestLabelsAndNamespaces: everything carries the release labels (so a
// selector finds all of it) and namespaced objects land in the release
// namespace.
func TestLabelsAndNamespaces(t *testing.T) {
	r := render(t, "")
	clusterScoped := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "CSIDriver": true, "StorageClass": true, "VolumeSnapshotClass": true}
	for _, o := range r.Objects {
		md := o.Map["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		if labels["app.kubernetes.io/instance"] != testRelease || labels["app.kubernetes.io/name"] != "filevol" {
			t.Errorf("%s %s labels %v", o.Kind, o.Name, labels)
		}
		if clusterScoped[o.Kind] != (o.Namespace == "") {
			t.Errorf("%s %s namespace %q", o.Kind, o.Name, o.Namespace)
		}
		if o.Namespace != "" && o.Namespace != testNamespace {
			t.Errorf("%s %s in namespace %s", o.Kind, o.Name, o.Namespace)
		}
	}
	// A release named like the chart does not repeat the name.
	if render(t, "fullnameOverride: storage\n").Find("DaemonSet", "storage-node") == nil {
		t.Error("fullnameOverride not used")
	}
}

func TestNotes(t *testing.T) {
	notes := render(t, "").Notes
	for _, want := range []string{"namespace storage", "rollout status daemonset/fv-filevol-node", "get csinode", "storageClassName: filevol",
		"--enable-distributed-snapshotting", "--set registrar=builtin", "helm uninstall fv -n storage"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	notes = render(t, "registrar: builtin\nlivenessProbe: builtin\nsnapshots: {enabled: false}\nstorageClasses: []\n").Notes
	for _, not := range []string{"--set registrar=builtin", "snapshot-controller", "storageClassName"} {
		if strings.Contains(notes, not) {
			t.Errorf("NOTES mention %q although it does not apply:\n%s", not, notes)
		}
	}
}
