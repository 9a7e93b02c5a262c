package chartrender

import (
	"io"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// snapCase is a chart layout: where the node-local driver's csi-snapshotter
// runs (per node, the default, or in its controller Deployment) and whether
// the shared-pool driver, with its own, is on.
type snapCase struct{ controller, shared bool }

// snapCases cover every csi-snapshotter the chart has.
var snapCases = []snapCase{{false, false}, {false, true}, {true, true}}

// values for the layout with snapshots.enabled and
// sharedPool.snapshots.enabled set to enabled ("": the default).
func (c snapCase) values(enabled string) string {
	var s string
	var local []string
	if c.controller {
		s += "pool: {shared: true}\n"
		local = append(local, "snapshotter: controller")
	}
	if enabled != "" {
		local = append(local, "enabled: "+enabled)
	}
	if len(local) > 0 {
		s += "snapshots: {" + strings.Join(local, ", ") + "}\n"
	}
	if c.shared {
		s += "sharedPool: {enabled: true"
		if enabled != "" {
			s += ", snapshots: {enabled: " + enabled + "}"
		}
		s += "}\n"
	}
	return s
}

// volumeAPIs: a cluster with the VolumeSnapshot CRDs and not the
// VolumeGroupSnapshot ones.
var volumeAPIs = SnapshotAPIs[:2]

// The pod annotation that holds a group-capable csi-snapshotter's pod
// apart while auto leaves group snapshots out.
const groupsOffAnnotation = "filevol.csi.io/group-snapshots"

// snapshotParts lists what of a render needs the snapshot CRDs: the
// classes, every csi-snapshotter container, and every RBAC rule on the
// snapshot API groups, as "Kind/name" and "Kind/name: container" strings.
func snapshotParts(t *testing.T, r *Result) []string {
	t.Helper()
	var out []string
	for _, o := range r.Objects {
		var spec *corev1.PodSpec
		var rules []rbacv1.PolicyRule
		switch typed := o.Typed.(type) {
		case *appsv1.DaemonSet:
			spec = &typed.Spec.Template.Spec
		case *appsv1.Deployment:
			spec = &typed.Spec.Template.Spec
		case *rbacv1.ClusterRole:
			rules = typed.Rules
		case *rbacv1.Role:
			rules = typed.Rules
		}
		if o.Kind == "VolumeSnapshotClass" || o.Kind == "VolumeGroupSnapshotClass" {
			out = append(out, o.Kind+"/"+o.Name)
		}
		if spec != nil && hasContainer(spec, "csi-snapshotter") {
			out = append(out, o.Kind+"/"+o.Name+": csi-snapshotter")
		}
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				if g == "snapshot.storage.k8s.io" || g == "groupsnapshot.storage.k8s.io" {
					out = append(out, o.Kind+"/"+o.Name+": "+g+" "+strings.Join(rule.Resources, ","))
				}
			}
		}
	}
	return out
}

// The shared-pool driver's provisioner may read a VolumeSnapshot to restore
// from it whatever sharedPool.snapshots says (the chart always gave it
// those rules; a rule on an API the cluster does not serve is harmless).
// The node-local provisioner's rules follow snapshots.enabled.
func withoutSharedProvisioner(parts []string) []string {
	return slices.DeleteFunc(slices.Clone(parts), func(p string) bool {
		return strings.HasPrefix(p, "ClusterRole/fv-filevol-shared-provisioner: ")
	})
}

func kinds(parts []string, prefix string) []string {
	var out []string
	for _, p := range parts {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	return out
}

// TestSnapshotsAutoWithoutCRDs: the default values on a cluster without
// the snapshot CRDs (kubeadm, kind, k3s as installed) render nothing that
// needs them, so helm install does not fail on "no matches for kind
// VolumeSnapshotClass", and NOTES say what was left out and how to add it.
func TestSnapshotsAutoWithoutCRDs(t *testing.T) {
	for _, c := range snapCases {
		values := c.values("")
		r := renderOn(t, values, nil)
		if got := withoutSharedProvisioner(snapshotParts(t, r)); len(got) > 0 {
			t.Errorf("values %q, no snapshot APIs: rendered %v", values, got)
		}
		for _, want := range []string{"Snapshots left out (snapshots.enabled: auto)", "no VolumeSnapshotClass, no csi-snapshotter",
			"helm upgrade fv <chart> -n storage --reuse-values", "--set snapshots.enabled=true", "client/config/crd"} {
			if !strings.Contains(r.Notes, want) {
				t.Errorf("values %q: NOTES do not say %q:\n%s", values, want, r.Notes)
			}
		}
		if c.shared && !strings.Contains(r.Notes, "--set sharedPool.snapshots.enabled=true") {
			t.Errorf("values %q: NOTES do not say how to turn the shared driver's snapshots on:\n%s", values, r.Notes)
		}
		if strings.Contains(r.Notes, "VolumeSnapshotClass: filevol") {
			t.Errorf("values %q: NOTES name a VolumeSnapshotClass that was not rendered:\n%s", values, r.Notes)
		}
	}
}

// TestSnapshotsAutoVolumeCRDsOnly: a cluster with the VolumeSnapshot CRDs
// and not the group ones gets volume snapshots (the classes, every
// csi-snapshotter) and no VolumeGroupSnapshotClass, which would fail the
// install. csi-snapshotter gets no group flag either way: v8.7.0 turns
// group snapshots off itself when their CRDs are missing at its start; a
// pod annotation restarts the group-capable ones when a helm upgrade finds
// the CRDs.
func TestSnapshotsAutoVolumeCRDsOnly(t *testing.T) {
	for _, c := range snapCases {
		values := c.values("")
		r := renderOn(t, values, volumeAPIs)
		all := render(t, values)
		want := slices.DeleteFunc(snapshotParts(t, all), func(p string) bool { return strings.HasPrefix(p, "VolumeGroupSnapshotClass/") })
		if got := snapshotParts(t, r); !slices.Equal(got, want) {
			t.Errorf("values %q, volume snapshot APIs only: rendered\n%v\nwant\n%v", values, got, want)
		}
		if len(kinds(want, "VolumeSnapshotClass/")) == 0 || !strings.Contains(strings.Join(want, " "), ": csi-snapshotter") {
			t.Fatalf("values %q: %v has no VolumeSnapshotClass or no csi-snapshotter; the test proves nothing", values, want)
		}
		for _, o := range r.Objects {
			var spec *corev1.PodSpec
			switch typed := o.Typed.(type) {
			case *appsv1.DaemonSet:
				spec = &typed.Spec.Template.Spec
			case *appsv1.Deployment:
				spec = &typed.Spec.Template.Spec
			default:
				continue
			}
			if !hasContainer(spec, "csi-snapshotter") {
				continue
			}
			for _, a := range container(t, spec, "csi-snapshotter").Args {
				if strings.Contains(a, "--feature-gates") || strings.Contains(strings.ToLower(a), "group-snapshot") {
					t.Errorf("values %q: %s: csi-snapshotter gets a group snapshot flag %s", values, o.Name, a)
				}
			}
		}
		// Every group-capable snapshotter (not the per-node ones) carries
		// the annotation; with every API nothing does.
		for _, o := range r.Objects {
			d, ok := o.Typed.(*appsv1.Deployment)
			if !ok {
				continue
			}
			has := hasContainer(&d.Spec.Template.Spec, "csi-snapshotter")
			if _, ann := d.Spec.Template.Annotations[groupsOffAnnotation]; ann != has {
				t.Errorf("values %q: Deployment %s: csi-snapshotter %v, annotation %s %v", values, o.Name, has, groupsOffAnnotation, ann)
			}
			if _, ann := all.Find("Deployment", o.Name).Typed.(*appsv1.Deployment).Spec.Template.Annotations[groupsOffAnnotation]; ann {
				t.Errorf("values %q: Deployment %s has %s with the group APIs served", values, o.Name, groupsOffAnnotation)
			}
		}
		if _, ann := daemonSet(t, r).Spec.Template.Annotations[groupsOffAnnotation]; ann {
			t.Errorf("values %q: the node pods' snapshotters never serve groups, yet carry %s", values, groupsOffAnnotation)
		}
		groups := c.controller || c.shared // the per-node snapshotter has no group class to leave out
		if got := strings.Contains(r.Notes, "no VolumeGroupSnapshotClass (volume snapshots are on)"); got != groups {
			t.Errorf("values %q: NOTES mention the group class left out: %v, want %v:\n%s", values, got, groups, r.Notes)
		}
		if strings.Contains(r.Notes, "no csi-snapshotter") {
			t.Errorf("values %q: NOTES say csi-snapshotter was left out:\n%s", values, r.Notes)
		}
	}
}

// TestSnapshotsAutoWithCRDs: with both sets of CRDs auto renders exactly
// what true does (what the chart rendered before auto, its default then),
// with no NOTES about anything left out and no annotation.
func TestSnapshotsAutoWithCRDs(t *testing.T) {
	for _, c := range snapCases {
		values := c.values("")
		auto, on := render(t, values), render(t, c.values("true"))
		if auto.Manifest != on.Manifest || auto.Notes != on.Notes {
			t.Errorf("values %q: auto with the snapshot APIs renders other than true", values)
		}
		if strings.Contains(auto.Notes, "left out") || strings.Contains(auto.Manifest, groupsOffAnnotation) {
			t.Errorf("values %q: something is said to be left out with every API served", values)
		}
	}
	// The group classes are there where they were before.
	r := render(t, snapCase{true, true}.values(""))
	for _, name := range []string{"filevol", "filevol-shared"} {
		if r.Find("VolumeGroupSnapshotClass", name) == nil {
			t.Errorf("no VolumeGroupSnapshotClass %s; kinds %v", name, r.Kinds())
		}
	}
}

// TestSnapshotsTrueWithoutCRDs: true renders everything with no API to go
// on (helm template offline, GitOps), exactly what auto does on a cluster
// with the CRDs; booleans behave as before auto existed.
func TestSnapshotsTrueWithoutCRDs(t *testing.T) {
	for _, c := range snapCases {
		on := c.values("true")
		got, want := renderOn(t, on, nil), render(t, c.values(""))
		if got.Manifest != want.Manifest {
			t.Errorf("values %q: true without the snapshot APIs renders other than auto with them", on)
		}
		if strings.Contains(got.Notes, "left out") {
			t.Errorf("values %q: NOTES say something was left out:\n%s", on, got.Notes)
		}
	}
}

// TestSnapshotsFalseWithCRDs: false renders none of it even where the
// cluster serves the snapshot APIs, and says nothing about turning it on.
func TestSnapshotsFalseWithCRDs(t *testing.T) {
	for _, c := range snapCases {
		off := c.values("false")
		r := render(t, off)
		if got := withoutSharedProvisioner(snapshotParts(t, r)); len(got) > 0 {
			t.Errorf("values %q: rendered %v", off, got)
		}
		if strings.Contains(r.Notes, "left out") || strings.Contains(r.Notes, "VolumeSnapshotClass:") {
			t.Errorf("values %q: NOTES speak of snapshots:\n%s", off, r.Notes)
		}
	}
}

// TestSnapshotsAutoEachDriver: the two drivers decide each by its own
// value: auto on one, true or false on the other.
func TestSnapshotsAutoEachDriver(t *testing.T) {
	r := renderOn(t, "sharedPool: {enabled: true, snapshots: {enabled: true}}\n", nil)
	got := snapshotParts(t, r)
	if slices.ContainsFunc(got, func(p string) bool {
		return strings.Contains(p, "fv-filevol-node") || p == "VolumeSnapshotClass/filevol"
	}) {
		t.Errorf("the node-local driver (auto, no APIs) rendered snapshot parts: %v", got)
	}
	if !slices.Contains(got, "VolumeGroupSnapshotClass/filevol-shared") || !slices.Contains(got, "Deployment/"+sharedName+": csi-snapshotter") {
		t.Errorf("the shared driver (true) lacks its snapshot parts: %v", got)
	}
	r = render(t, "snapshots: {enabled: false}\nsharedPool: {enabled: true}\n")
	got = snapshotParts(t, r)
	if slices.Contains(got, "VolumeSnapshotClass/filevol") || !slices.Contains(got, "VolumeSnapshotClass/filevol-shared") {
		t.Errorf("snapshots false, the shared driver auto with the APIs: %v", got)
	}
}

// TestSnapshotterInControllerValidatedWithoutCRDs: the check that the
// central snapshotter has a controller and a shared pool applies under
// auto whether or not the CRDs are there now: otherwise the install would
// pass and the helm upgrade that turns snapshots on would fail. false
// skips it, as before.
func TestSnapshotterInControllerValidatedWithoutCRDs(t *testing.T) {
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, enabled := range []string{"auto", "true"} {
		_, err := RenderOn(dir, testRelease, testNamespace, "snapshots: {snapshotter: controller, enabled: "+enabled+"}\n", nil)
		if err == nil || !strings.Contains(err.Error(), "needs pool.shared=true") {
			t.Errorf("enabled %s, no APIs: error %v, want the pool.shared one", enabled, err)
		}
	}
	if _, err := RenderOn(dir, testRelease, testNamespace, "snapshots: {snapshotter: controller, enabled: false}\n", SnapshotAPIs); err != nil {
		t.Errorf("enabled false: %v", err)
	}
}

// TestSnapshotsEnabledSchema: auto, true and false, nothing else.
func TestSnapshotsEnabledSchema(t *testing.T) {
	for _, v := range []string{"auto", "true", "false"} {
		for _, values := range []string{"snapshots: {enabled: " + v + "}\n", "sharedPool: {snapshots: {enabled: " + v + "}}\n"} {
			if err := renderErr(t, values); err != nil {
				t.Errorf("values %q: %v", values, err)
			}
		}
	}
	for _, values := range []string{"snapshots: {enabled: yes-please}\n", "sharedPool: {snapshots: {enabled: Auto}}\n", "snapshots: {enabled: 1}\n"} {
		if err := renderErr(t, values); err == nil || !strings.Contains(err.Error(), "enabled") {
			t.Errorf("values %q: error %v, want one naming enabled", values, err)
		}
	}
}

// installOnCluster renders as helm install --dry-run=server against a
// cluster whose discovery lists resources (group/version -> kinds).
func installOnCluster(t *testing.T, resources map[string][]string, values string) *Result {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{
		RESTClientGetter: fakeCluster{gitVersion: KubeVersion, resources: resources},
		KubeClient:       &kubefake.PrintingKubeClient{Out: io.Discard},
		Releases:         storage.Init(driver.NewMemory()),
	}
	r, err := renderWith(dir, testRelease, testNamespace, values, cfg, func(i *action.Install) {
		i.ClientOnly = false
		i.DryRunOption = "server"
	})
	if err != nil {
		t.Fatalf("install with values %q: %v", values, err)
	}
	return r
}

// TestSnapshotsAutoFromDiscovery: on helm install, .Capabilities comes
// from the API server's discovery (not --api-versions), and auto reads the
// CRDs' kinds there: a cluster without them, with the volume ones, with
// both.
func TestSnapshotsAutoFromDiscovery(t *testing.T) {
	values := snapCase{true, true}.values("")
	bare := map[string][]string{}
	for gv, k := range clusterResources(t) {
		if !strings.Contains(gv, "snapshot.storage.k8s.io") {
			bare[gv] = k
		}
	}
	withVolume := map[string][]string{"snapshot.storage.k8s.io/v1": {"VolumeSnapshot", "VolumeSnapshotContent", "VolumeSnapshotClass"}}
	withGroups := map[string][]string{"groupsnapshot.storage.k8s.io/v1": {"VolumeGroupSnapshot", "VolumeGroupSnapshotContent", "VolumeGroupSnapshotClass"}}
	for gv, k := range bare {
		withVolume[gv] = k
	}
	for gv, k := range withVolume {
		withGroups[gv] = k
	}
	for _, tc := range []struct {
		name      string
		resources map[string][]string
		classes   []string
	}{
		{"no snapshot CRDs", bare, nil},
		{"VolumeSnapshot CRDs", withVolume, []string{"VolumeSnapshotClass/filevol", "VolumeSnapshotClass/filevol-shared"}},
		{"both", withGroups, []string{"VolumeGroupSnapshotClass/filevol", "VolumeGroupSnapshotClass/filevol-shared", "VolumeSnapshotClass/filevol", "VolumeSnapshotClass/filevol-shared"}},
	} {
		parts := snapshotParts(t, installOnCluster(t, tc.resources, values))
		classes := append(kinds(parts, "VolumeSnapshotClass/"), kinds(parts, "VolumeGroupSnapshotClass/")...)
		slices.Sort(classes)
		if !slices.Equal(classes, tc.classes) {
			t.Errorf("%s: classes %v, want %v", tc.name, classes, tc.classes)
		}
		if snapshotters := len(kinds(parts, "Deployment/")); snapshotters != 2*min(len(tc.classes), 1) {
			t.Errorf("%s: %d csi-snapshotters, want %d: %v", tc.name, snapshotters, 2*min(len(tc.classes), 1), parts)
		}
	}
}
