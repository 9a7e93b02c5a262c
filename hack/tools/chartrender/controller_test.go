package chartrender

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
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
	wantArg(t, fv, "--pool-dir", "/pool")
	wantArg(t, fv, "--http-endpoint", "0.0.0.0:9811")
	noArg(t, fv, "--registration-dir")
	if v := volume(spec, "pool"); v == nil || v.EmptyDir == nil {
		t.Errorf("pool volume %+v, want an emptyDir", v)
	}

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
	for _, o := range r.Objects {
		if b, ok := o.Typed.(*rbacv1.ClusterRoleBinding); ok {
			for _, s := range b.Subjects {
				if s.Name == ctrlName {
					t.Errorf("%s still binds %s", b.Name, s.Name)
				}
			}
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

// TestControllerSharedPool: with pool.shared the controller's filevol works
// on the node's pool (ControllerExpandVolume grows images there).
func TestControllerSharedPool(t *testing.T) {
	r := render(t, "pool: {shared: true, hostPath: /srv/pool}\n")
	spec := &deployment(t, r).Spec.Template.Spec
	fv := container(t, spec, "filevol")
	wantArg(t, fv, "--pool-dir", "/srv/pool")
	if m := mount(fv, "pool"); m == nil || m.MountPath != "/srv/pool" || propagation(m) != "" {
		t.Errorf("pool mount %+v", m)
	}
	if hp := hostPaths(spec); len(hp) != 1 || hp["pool"] != "/srv/pool DirectoryOrCreate" {
		t.Errorf("host paths %v, want only the pool", hp)
	}
	for _, c := range spec.Containers {
		unprivileged(t, &c)
	}
	if sc := spec.SecurityContext; sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("pod security context %+v: the pool is root's", sc)
	}
}
