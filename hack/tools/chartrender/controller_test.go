package chartrender

import (
	"slices"
	"testing"
)

func TestControllerDeployment(t *testing.T) {
	r := render(t, "")
	d := deployment(t, r)
	spec := &d.Spec.Template.Spec
	if got := containerNames(spec); !slices.Equal(got, []string{"csi-resizer", "filevol", "liveness-probe"}) {
		t.Fatalf("containers %v", got)
	}
	if *d.Spec.Replicas != 1 {
		t.Errorf("replicas %d", *d.Spec.Replicas)
	}
	rz := container(t, spec, "csi-resizer")
	if rz.Image != "registry.k8s.io/sig-storage/csi-resizer:v2.3.0" {
		t.Errorf("resizer image %s", rz.Image)
	}
	wantArg(t, rz, "--leader-election", "")
	wantArg(t, rz, "--leader-election-namespace", testNamespace)
	wantArg(t, rz, "--handle-volume-inuse-error", "false")
	wantArg(t, rz, "--csi-address", "/csi/csi.sock")

	fv := container(t, spec, "filevol")
	wantArg(t, fv, "--mode", "controller")
	wantArg(t, fv, "--endpoint", "unix:///csi/csi.sock")
	noArg(t, fv, "--registration-dir")

	// Nothing of the host: no hostPath, no privilege, not root.
	if hp := hostPaths(spec); len(hp) != 0 {
		t.Errorf("controller mounts host paths %v", hp)
	}
	for _, c := range spec.Containers {
		unprivileged(t, &c)
		for _, m := range c.VolumeMounts {
			if propagation(&m) != "" {
				t.Errorf("%s: mount propagation on %s", c.Name, m.Name)
			}
		}
	}
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod security context %+v: want a non-root user", sc)
	}
	if spec.HostNetwork || spec.ServiceAccountName != ctrlName {
		t.Errorf("hostNetwork %v serviceAccount %s", spec.HostNetwork, spec.ServiceAccountName)
	}
}

func TestControllerDisabled(t *testing.T) {
	r := render(t, "controller: {enabled: false}\n")
	if r.Find("Deployment", ctrlName) != nil {
		t.Error("Deployment rendered with controller.enabled=false")
	}
	for _, o := range r.Objects {
		if o.Name == ctrlName || o.Name == "fv-filevol-resizer" {
			t.Errorf("%s %s rendered with controller.enabled=false", o.Kind, o.Name)
		}
	}
	daemonSet(t, r)
}

func TestSnapshotsDisabled(t *testing.T) {
	r := render(t, "snapshots: {enabled: false}\n")
	if hasContainer(&daemonSet(t, r).Spec.Template.Spec, "csi-snapshotter") {
		t.Error("csi-snapshotter rendered with snapshots.enabled=false")
	}
	if n := r.Kinds()["VolumeSnapshotClass"]; n != 0 {
		t.Errorf("%d VolumeSnapshotClasses", n)
	}
	if r.Find("ClusterRole", "fv-filevol-snapshotter") != nil {
		t.Error("snapshotter ClusterRole rendered")
	}
	for _, rule := range clusterRole(t, r, "fv-filevol-provisioner").Rules {
		if slices.Contains(rule.APIGroups, "snapshot.storage.k8s.io") {
			t.Errorf("provisioner may still %v %v", rule.Verbs, rule.Resources)
		}
	}
}
