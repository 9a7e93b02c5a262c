package chartrender

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
)

const snapshotterInController = "pool: {shared: true}\nsnapshots: {snapshotter: controller}\n"

// No container anywhere turns group snapshots off: csi-snapshotter v8.7.0
// has them on by default (GA), and filevol serves the GroupController.
func TestNoGroupSnapshotFeatureGate(t *testing.T) {
	for _, values := range []string{"", snapshotterInController, sharedOn} {
		if m := render(t, values).Manifest; strings.Contains(m, "CSIVolumeGroupSnapshot") || strings.Contains(m, "--feature-gates") {
			t.Errorf("values %q: a container sets a feature gate", values)
		}
	}
}

// The default (snapshotter: node): csi-snapshotter per node pod, which
// never sees a group, so no VolumeGroupSnapshotClass is offered.
func TestSnapshotterPerNodeHasNoGroupClass(t *testing.T) {
	r := render(t, "")
	if !hasContainer(&daemonSet(t, r).Spec.Template.Spec, "csi-snapshotter") {
		t.Fatal("no csi-snapshotter in the node pods")
	}
	if hasContainer(&deployment(t, r).Spec.Template.Spec, "csi-snapshotter") {
		t.Error("csi-snapshotter in the controller Deployment too: two would handle one content")
	}
	wantArg(t, container(t, &daemonSet(t, r).Spec.Template.Spec, "csi-snapshotter"), "--node-deployment", "")
	if n := r.Kinds()["VolumeGroupSnapshotClass"]; n != 0 {
		t.Errorf("%d VolumeGroupSnapshotClasses with a per-node snapshotter", n)
	}
	if got := bindingSubjects(t, r, "fv-filevol-snapshotter"); !slices.Equal(got, []string{nodeName}) {
		t.Errorf("snapshotter role bound to %v", got)
	}
}

// snapshotter: controller: one csi-snapshotter, in the controller
// Deployment with leader election, bound to its ServiceAccount; none in the
// node pods; a VolumeGroupSnapshotClass of the driver.
func TestSnapshotterInController(t *testing.T) {
	r := render(t, snapshotterInController)
	if hasContainer(&daemonSet(t, r).Spec.Template.Spec, "csi-snapshotter") {
		t.Error("csi-snapshotter still in the node pods")
	}
	spec := &deployment(t, r).Spec.Template.Spec
	if got := containerNames(spec); !slices.Equal(got, []string{"csi-resizer", "csi-snapshotter", "filevol", "liveness-probe"}) {
		t.Fatalf("controller containers %v", got)
	}
	sn := container(t, spec, "csi-snapshotter")
	wantArg(t, sn, "--leader-election", "")
	wantArg(t, sn, "--leader-election-namespace", testNamespace)
	wantArg(t, sn, "--csi-address", "/csi/csi.sock")
	noArg(t, sn, "--node-deployment")
	unprivileged(t, sn)
	if sn.Image != "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0" {
		t.Errorf("image %s", sn.Image)
	}
	// Its filevol opens the nodes' pool: that is where it snapshots.
	wantArg(t, container(t, spec, "filevol"), "--pool-dir", "/var/lib/filevol/pool")
	if got := bindingSubjects(t, r, "fv-filevol-snapshotter"); !slices.Equal(got, []string{ctrlName}) {
		t.Errorf("snapshotter role bound to %v", got)
	}
	// Its Lease: the controller's Role (the resizer's) grants leases.
	if got := ruleStrings(r.Find("Role", "fv-filevol-resizer").Typed.(*rbacv1.Role).Rules); !slices.Contains(got, "coordination.k8s.io leases: get,create,update") {
		t.Errorf("controller Role %q", got)
	}
	g := r.Find("VolumeGroupSnapshotClass", "filevol")
	if g == nil {
		t.Fatal("no VolumeGroupSnapshotClass filevol")
	}
	if g.APIVersion != "groupsnapshot.storage.k8s.io/v1" || g.Map["driver"] != "filevol.csi.io" || g.Map["deletionPolicy"] != "Delete" {
		t.Errorf("VolumeGroupSnapshotClass %v", g.Map)
	}
	r = render(t, "pool: {shared: true}\nsnapshots: {snapshotter: controller, volumeGroupSnapshotClass: {create: false}}\n")
	if n := r.Kinds()["VolumeGroupSnapshotClass"]; n != 0 {
		t.Errorf("volumeGroupSnapshotClass.create=false rendered %d", n)
	}
	r = render(t, "pool: {shared: true}\nsnapshots: {snapshotter: controller, volumeGroupSnapshotClass: {name: db, default: true, deletionPolicy: Retain}}\n")
	g = r.Find("VolumeGroupSnapshotClass", "db")
	if g == nil || g.Map["deletionPolicy"] != "Retain" ||
		g.Map["metadata"].(map[string]any)["annotations"].(map[string]any)["groupsnapshot.storage.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("VolumeGroupSnapshotClass db %v", g)
	}
}

// snapshotter: controller where it cannot serve: refused, naming the fix.
func TestSnapshotterInControllerRefused(t *testing.T) {
	for values, want := range map[string]string{
		"snapshots: {snapshotter: controller}\n":                                                     "needs pool.shared=true",
		"snapshots: {snapshotter: controller}\npool: {shared: true}\ncontroller: {enabled: false}\n": "set controller.enabled=true",
		"snapshots: {snapshotter: everywhere}\n":                                                     "snapshotter",
	} {
		err := renderErr(t, values)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: error %v, want it to say %q", values, err, want)
		}
	}
	// Snapshots off: nothing to refuse.
	render(t, "snapshots: {enabled: false, snapshotter: controller}\n")
}

// The shared-pool driver's central csi-snapshotter serves groups: its own
// VolumeGroupSnapshotClass.
func TestSharedGroupSnapshotClass(t *testing.T) {
	r := render(t, sharedOn)
	g := r.Find("VolumeGroupSnapshotClass", "filevol-shared")
	if g == nil || g.Map["driver"] != "shared.filevol.csi.io" {
		t.Fatalf("shared VolumeGroupSnapshotClass %v", g)
	}
	r = render(t, "sharedPool: {enabled: true, snapshots: {enabled: false}}\n")
	if g := r.Find("VolumeGroupSnapshotClass", "filevol-shared"); g != nil {
		t.Error("a group snapshot class without a snapshotter")
	}
}

func TestVolumeAttributesClasses(t *testing.T) {
	if n := render(t, "").Kinds()["VolumeAttributesClass"]; n != 0 {
		t.Errorf("%d VolumeAttributesClasses by default", n)
	}
	r := render(t, "volumeAttributesClasses:\n- {name: fast, parameters: {writeIOPS: \"2000\"}, labels: {tier: a}}\n- {name: slow, parameters: {writeBytesPerSecond: 1Mi}}\n")
	o := r.Find("VolumeAttributesClass", "fast")
	if o == nil {
		t.Fatal("no VolumeAttributesClass fast")
	}
	v := o.Typed.(*storagev1.VolumeAttributesClass)
	if v.DriverName != "filevol.csi.io" || v.Parameters["writeIOPS"] != "2000" || len(v.Parameters) != 1 || v.Labels["tier"] != "a" {
		t.Errorf("fast %+v", v)
	}
	if o := r.Find("VolumeAttributesClass", "slow"); o == nil || o.Typed.(*storagev1.VolumeAttributesClass).Parameters["writeBytesPerSecond"] != "1Mi" {
		t.Errorf("slow %+v", o)
	}
	if err := renderErr(t, "volumeAttributesClasses:\n- {name: x}\n"); err == nil {
		t.Error("a class without parameters accepted")
	}
}

func bindingSubjects(t *testing.T, r *Result, name string) []string {
	t.Helper()
	o := r.Find("ClusterRoleBinding", name)
	if o == nil {
		t.Fatalf("no ClusterRoleBinding %s", name)
	}
	var out []string
	for _, s := range o.Typed.(*rbacv1.ClusterRoleBinding).Subjects {
		out = append(out, s.Name)
	}
	return out
}
