package chartrender

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
)

const (
	sharedOn     = "sharedPool: {enabled: true}\n"
	sharedSocket = "/var/lib/kubelet/plugins/shared.filevol.csi.io/csi.sock"
)

// TestSharedDriverOffByDefault: the default install is the node-local
// driver alone, exactly as before the shared-pool driver existed.
func TestSharedDriverOffByDefault(t *testing.T) {
	r := render(t, "")
	for _, o := range r.Objects {
		if strings.Contains(o.Name, "shared") {
			t.Errorf("%s %s rendered with sharedPool.enabled=false", o.Kind, o.Name)
		}
	}
	for _, c := range daemonSet(t, r).Spec.Template.Spec.Containers {
		if strings.Contains(c.Name, "shared") {
			t.Errorf("node pod has %s", c.Name)
		}
	}
}

func TestSharedCSIDriverAndClasses(t *testing.T) {
	r := render(t, sharedOn)
	for name, attach := range map[string]bool{"filevol.csi.io": false, "shared.filevol.csi.io": true} {
		o := r.Find("CSIDriver", name)
		if o == nil {
			t.Fatalf("no CSIDriver %s", name)
		}
		d := o.Typed.(*storagev1.CSIDriver).Spec
		if d.AttachRequired == nil || *d.AttachRequired != attach || d.StorageCapacity == nil || !*d.StorageCapacity ||
			d.PodInfoOnMount == nil || !*d.PodInfoOnMount || d.FSGroupPolicy == nil || *d.FSGroupPolicy != storagev1.FileFSGroupPolicy {
			t.Errorf("CSIDriver %s: %+v, want attachRequired %v, storageCapacity, podInfoOnMount, fsGroupPolicy File", name, d, attach)
		}
	}
	sc := r.Find("StorageClass", "filevol-shared")
	if sc == nil || sc.Typed.(*storagev1.StorageClass).Provisioner != "shared.filevol.csi.io" {
		t.Fatalf("StorageClass filevol-shared %+v", sc)
	}
	if r.Find("StorageClass", "filevol").Typed.(*storagev1.StorageClass).Provisioner != "filevol.csi.io" {
		t.Error("the node-local class changed provisioner")
	}
	vsc := r.Find("VolumeSnapshotClass", "filevol-shared")
	if vsc == nil || vsc.Map["driver"] != "shared.filevol.csi.io" {
		t.Errorf("VolumeSnapshotClass filevol-shared %+v", vsc)
	}
}

func TestSharedControllerDeployment(t *testing.T) {
	r := render(t, sharedOn)
	d := sharedDeployment(t, r)
	spec := &d.Spec.Template.Spec
	if got, want := containerNames(spec), []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "filevol", "liveness-probe"}; !slices.Equal(got, want) {
		t.Fatalf("containers %v, want %v", got, want)
	}
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want the example's 2", *d.Spec.Replicas)
	}
	// Every sidecar elects a leader: the replicas never act together.
	for _, name := range []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"} {
		c := container(t, spec, name)
		wantArg(t, c, "--leader-election", "")
		wantArg(t, c, "--leader-election-namespace", testNamespace)
		wantArg(t, c, "--csi-address", "/csi/csi.sock")
		unprivileged(t, c)
	}
	if got := container(t, spec, "csi-attacher").Image; got != "registry.k8s.io/sig-storage/csi-attacher:v4.13.0" {
		t.Errorf("attacher image %s", got)
	}
	p := container(t, spec, "csi-provisioner")
	noArg(t, p, "--node-deployment")
	wantArg(t, p, "--enable-capacity", "")
	wantArg(t, p, "--capacity-ownerref-level", "2")
	if fieldRefEnv(p, "POD_NAME") != "metadata.name" || fieldRefEnv(p, "NAMESPACE") != "metadata.namespace" {
		t.Errorf("provisioner env %v: capacity needs POD_NAME and NAMESPACE", p.Env)
	}
	fv := container(t, spec, "filevol")
	wantArg(t, fv, "--mode", "controller")
	wantArg(t, fv, "--driver-name", "shared.filevol.csi.io")
	wantArg(t, fv, "--pool-dir", "/mnt/filevol-shared")
	wantArg(t, fv, "--pool-shared", "")
	wantArg(t, fv, "--pool-name", "shared")
	wantArg(t, fv, "--controller-id", sharedName)
	noArg(t, fv, "--registration-dir")
	noArg(t, fv, "--defer-expansion-to-node")
	unprivileged(t, fv)
	if m := mount(fv, "shared-pool"); m == nil || m.MountPath != "/mnt/filevol-shared" || propagation(m) != "HostToContainer" {
		t.Errorf("filevol's shared-pool mount %+v", m)
	}
	if hp := hostPaths(spec); len(hp) != 1 || hp["shared-pool"] != "/mnt/filevol-shared Directory" {
		t.Errorf("host paths %v, want only the shared pool, which must exist", hp)
	}
	if spec.ServiceAccountName != sharedName {
		t.Errorf("serviceAccountName %s", spec.ServiceAccountName)
	}
}

func TestSharedNodeContainers(t *testing.T) {
	r := render(t, sharedOn)
	spec := &daemonSet(t, r).Spec.Template.Spec
	want := []string{"filevol", "csi-provisioner", "csi-snapshotter", "node-driver-registrar", "liveness-probe",
		"filevol-shared", "node-driver-registrar-shared", "liveness-probe-shared"}
	if got := containerNames(spec); !slices.Equal(got, want) {
		t.Fatalf("containers %v, want %v", got, want)
	}
	fv := container(t, spec, "filevol-shared")
	if !privileged(fv) {
		t.Error("filevol-shared is not privileged (loop devices, mounts)")
	}
	wantArg(t, fv, "--mode", "node")
	wantArg(t, fv, "--endpoint", "unix://"+sharedSocket)
	wantArg(t, fv, "--driver-name", "shared.filevol.csi.io")
	wantArg(t, fv, "--pool-dir", "/mnt/filevol-shared")
	wantArg(t, fv, "--pool-shared", "")
	wantArg(t, fv, "--pool-name", "shared")
	wantArg(t, fv, "--http-endpoint", "0.0.0.0:9813")
	wantArg(t, fv, "--cgroup-roots", "/host/cgroup/blkio,/host/cgroup")
	noArg(t, fv, "--registration-dir")
	if fieldRefEnv(fv, "NODE_NAME") != "spec.nodeName" {
		t.Error("filevol-shared: --node-id is not the node's name")
	}
	for vol, want := range map[string]string{
		"kubelet-plugins": "/var/lib/kubelet/plugins Bidirectional",
		"kubelet-pods":    "/var/lib/kubelet/pods Bidirectional",
		"shared-pool":     "/mnt/filevol-shared HostToContainer",
		"dev":             "/dev ",
		"cgroup":          "/host/cgroup ",
	} {
		m := mount(fv, vol)
		if m == nil || m.MountPath+" "+propagation(m) != want {
			t.Errorf("filevol-shared mount %s: %+v, want %q", vol, m, want)
		}
	}
	reg := container(t, spec, "node-driver-registrar-shared")
	wantArg(t, reg, "--kubelet-registration-path", sharedSocket)
	wantArg(t, reg, "--http-endpoint", "0.0.0.0:9814")
	wantArg(t, container(t, spec, "liveness-probe-shared"), "--http-endpoint", "0.0.0.0:9815")
	hp := hostPaths(spec)
	if hp["shared-pool"] != "/mnt/filevol-shared Directory" || hp["shared-socket-dir"] != "/var/lib/kubelet/plugins/shared.filevol.csi.io DirectoryOrCreate" {
		t.Errorf("host paths %v", hp)
	}
	if got := container(t, spec, "filevol").LivenessProbe.HTTPGet.Port.IntValue(); got != 9810 {
		t.Errorf("node-local liveness port %d", got)
	}
}

// TestSharedValuesMatrix: the shared driver with the other choices of the
// chart, each rendered and checked for what it changes.
func TestSharedValuesMatrix(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		node, ctrl   []string // containers of the node pod and the shared controller
		check        func(t *testing.T, r *Result)
	}{{
		name:   "shared alone",
		values: sharedOn + "localPool: {enabled: false}\n",
		node:   []string{"filevol-shared", "node-driver-registrar-shared", "liveness-probe-shared"},
		ctrl:   []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "filevol", "liveness-probe"},
		check: func(t *testing.T, r *Result) {
			for _, kind := range []string{"CSIDriver", "StorageClass", "VolumeSnapshotClass"} {
				if r.Kinds()[kind] != 1 {
					t.Errorf("%d %s, want only the shared driver's", r.Kinds()[kind], kind)
				}
			}
			if r.Find("Deployment", ctrlName) != nil || r.Find("ClusterRole", "fv-filevol-provisioner") != nil {
				t.Error("node-local controller or provisioner RBAC rendered with localPool.enabled=false")
			}
			if hp := hostPaths(&daemonSet(t, r).Spec.Template.Spec); hp["pool"] != "" || hp["socket-dir"] != "" {
				t.Errorf("node pod mounts the node-local pool or socket: %v", hp)
			}
		},
	}, {
		name:   "builtin registrar and liveness",
		values: sharedOn + "registrar: builtin\nlivenessProbe: builtin\n",
		node:   []string{"filevol", "csi-provisioner", "csi-snapshotter", "filevol-shared"},
		ctrl:   []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "filevol"},
		check: func(t *testing.T, r *Result) {
			spec := &daemonSet(t, r).Spec.Template.Spec
			fv := container(t, spec, "filevol-shared")
			wantArg(t, fv, "--registration-dir", "/var/lib/kubelet/plugins_registry")
			if fv.LivenessProbe.HTTPGet.Port.IntValue() != 9813 {
				t.Errorf("liveness port %v, want filevol-shared's own 9813", fv.LivenessProbe.HTTPGet.Port)
			}
			if _, ok := hostPaths(spec)["shared-socket-dir"]; ok {
				t.Error("shared-socket-dir without a sidecar to use it")
			}
		},
	}, {
		name:   "no snapshots",
		values: "sharedPool: {enabled: true, snapshots: {enabled: false}}\n",
		node:   []string{"filevol", "csi-provisioner", "csi-snapshotter", "node-driver-registrar", "liveness-probe", "filevol-shared", "node-driver-registrar-shared", "liveness-probe-shared"},
		ctrl:   []string{"csi-provisioner", "csi-attacher", "csi-resizer", "filevol", "liveness-probe"},
		check: func(t *testing.T, r *Result) {
			if r.Find("ClusterRole", "fv-filevol-shared-snapshotter") != nil || r.Find("VolumeSnapshotClass", "filevol-shared") != nil {
				t.Error("shared snapshotter RBAC or class without snapshots")
			}
		},
	}, {
		name: "host network, loopback API server",
		values: "apiServer: {host: 127.0.0.1, port: 6443}\nnode: {hostNetwork: true}\ncontroller: {hostNetwork: true}\n" +
			"sharedPool: {enabled: true, name: pool-a, hostPath: /srv/shared, mountPropagation: None, controller: {hostNetwork: true, replicas: 1}}\n",
		node: []string{"filevol", "csi-provisioner", "csi-snapshotter", "node-driver-registrar", "liveness-probe", "filevol-shared", "node-driver-registrar-shared", "liveness-probe-shared"},
		ctrl: []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "filevol", "liveness-probe"},
		check: func(t *testing.T, r *Result) {
			d := sharedDeployment(t, r)
			if !d.Spec.Template.Spec.HostNetwork || *d.Spec.Replicas != 1 {
				t.Error("shared controller not on the host's network, or replicas not taken")
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "liveness-probe" {
					continue // it talks to filevol only
				}
				if v, _ := envValue(&c, "KUBERNETES_SERVICE_HOST"); v != "127.0.0.1" {
					t.Errorf("%s: KUBERNETES_SERVICE_HOST %q", c.Name, v)
				}
			}
			fv := container(t, &d.Spec.Template.Spec, "filevol")
			wantArg(t, fv, "--pool-name", "pool-a")
			wantArg(t, fv, "--pool-dir", "/srv/shared")
			wantArg(t, fv, "--http-endpoint", "127.0.0.1:9816")
			if m := mount(fv, "shared-pool"); propagation(m) != "None" {
				t.Errorf("mountPropagation %q, want the value's None", propagation(m))
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.values)
			if got := containerNames(&daemonSet(t, r).Spec.Template.Spec); !slices.Equal(got, tc.node) {
				t.Errorf("node containers %v, want %v", got, tc.node)
			}
			if got := containerNames(&sharedDeployment(t, r).Spec.Template.Spec); !slices.Equal(got, tc.ctrl) {
				t.Errorf("controller containers %v, want %v", got, tc.ctrl)
			}
			tc.check(t, r)
		})
	}
}

func TestSharedValuesRefused(t *testing.T) {
	for values, want := range map[string]string{
		"localPool: {enabled: false}\n":                                                                                           "nothing to install",
		"sharedPool: {enabled: true, driverName: filevol.csi.io}\n":                                                               "sharedPool.driverName must differ",
		"sharedPool: {enabled: true, hostPath: /var/lib/filevol/pool}\n":                                                          "sharedPool.hostPath must differ",
		"sharedPool: {enabled: true, node: {ports: {http: 9808}}}\n":                                                              "must differ",
		"sharedPool: {enabled: true, name: 'bad name'}\n":                                                                         "/sharedPool/name",
		"sharedPool: {enabled: true}\napiServer: {host: 127.0.0.1}\nnode: {hostNetwork: true}\ncontroller: {hostNetwork: true}\n": "sharedPool.controller.hostNetwork=true",
		"sharedPool: {enabled: true, controller: {hostNetwork: true, ports: {http: 9811}}}\ncontroller: {hostNetwork: true}\n":    "must differ",
	} {
		err := renderErr(t, values)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: error %v, want one containing %q", values, err, want)
		}
	}
}

// The exact grants of the shared controller's roles.
var wantSharedRules = map[string][]string{
	"ClusterRole/fv-filevol-shared-provisioner": {
		" persistentvolumes: get,list,watch,create,patch,delete",
		" persistentvolumeclaims: get,list,watch,update",
		"storage.k8s.io storageclasses: get,list,watch",
		" events: create,update,patch",
		"storage.k8s.io csinodes: get,list,watch",
		" nodes: get,list,watch",
		// Before DeleteVolume: is the volume still attached somewhere?
		"storage.k8s.io volumeattachments: get,list,watch",
		// A claim's VolumeAttributesClass: its parameters go to CreateVolume.
		"storage.k8s.io volumeattributesclasses: get",
		"snapshot.storage.k8s.io volumesnapshots: get,list,watch,update",
		"snapshot.storage.k8s.io volumesnapshotcontents: get,list",
	},
	"ClusterRole/fv-filevol-shared-attacher": {
		" persistentvolumes: get,list,watch,patch",
		"storage.k8s.io csinodes: get,list,watch",
		"storage.k8s.io volumeattachments: get,list,watch,patch",
		"storage.k8s.io volumeattachments/status: patch",
	},
	"ClusterRole/fv-filevol-shared-resizer": {
		" persistentvolumes: get,list,watch,patch",
		" persistentvolumeclaims: get,list,watch",
		" persistentvolumeclaims/status: patch",
		" events: create,update,patch",
		// VolumeAttributesClass (GA): csi-resizer v2.3.0 watches them when the API is served.
		"storage.k8s.io volumeattributesclasses: get,list,watch",
	},
	"ClusterRole/fv-filevol-shared-snapshotter": {
		" events: create,update,patch",
		"snapshot.storage.k8s.io volumesnapshotclasses: get,list,watch",
		"snapshot.storage.k8s.io volumesnapshotcontents: get,list,watch,update,patch",
		"snapshot.storage.k8s.io volumesnapshotcontents/status: update,patch",
		"groupsnapshot.storage.k8s.io volumegroupsnapshotclasses: get,list,watch",
		"groupsnapshot.storage.k8s.io volumegroupsnapshotcontents: get,list,watch,update,patch",
		"groupsnapshot.storage.k8s.io volumegroupsnapshotcontents/status: update,patch",
	},
	"Role/fv-filevol-shared-controller": {
		"coordination.k8s.io leases: get,create,update",
		"storage.k8s.io csistoragecapacities: get,list,watch,create,update,patch,delete",
		" pods: get",
		"apps replicasets: get",
	},
}

func TestSharedRBAC(t *testing.T) {
	r := render(t, sharedOn)
	for key, want := range wantSharedRules {
		kind, name, _ := strings.Cut(key, "/")
		o := r.Find(kind, name)
		if o == nil {
			t.Errorf("%s not rendered", key)
			continue
		}
		var rules []rbacv1.PolicyRule
		switch v := o.Typed.(type) {
		case *rbacv1.ClusterRole:
			rules = v.Rules
		case *rbacv1.Role:
			rules = v.Rules
		}
		if got := ruleStrings(rules); !slices.Equal(got, want) {
			t.Errorf("%s rules:\n got  %q\n want %q", key, got, want)
		}
		// Each is bound to the shared controller's ServiceAccount, and to it alone.
		b := r.Find(kind+"Binding", name)
		if b == nil {
			t.Errorf("%s has no binding", key)
			continue
		}
		var subjects []rbacv1.Subject
		switch v := b.Typed.(type) {
		case *rbacv1.ClusterRoleBinding:
			subjects = v.Subjects
		case *rbacv1.RoleBinding:
			subjects = v.Subjects
		}
		if len(subjects) != 1 || subjects[0].Name != sharedName || subjects[0].Namespace != testNamespace {
			t.Errorf("%s bound to %+v", key, subjects)
		}
	}
	// No other shared role than these; the driver's event role covers the
	// shared controller too.
	for _, o := range r.Objects {
		if (o.Kind == "ClusterRole" || o.Kind == "Role") && strings.Contains(o.Name, "shared") {
			if _, ok := wantSharedRules[o.Kind+"/"+o.Name]; !ok {
				t.Errorf("unexpected %s %s", o.Kind, o.Name)
			}
		}
	}
	crb := r.Find("ClusterRoleBinding", "fv-filevol-driver").Typed.(*rbacv1.ClusterRoleBinding)
	if !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool { return s.Name == sharedName }) {
		t.Errorf("the driver role is not bound to %s: %+v", sharedName, crb.Subjects)
	}
}

func TestSharedNotes(t *testing.T) {
	notes := render(t, sharedOn).Notes
	for _, want := range []string{"Shared-pool driver shared.filevol.csi.io: volumes in /mnt/filevol-shared",
		"rollout status deployment/fv-filevol-shared-controller", "filevol-shared: ext4, thin", "kubectl get volumeattachments",
		"storageClassName: filevol"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	if !strings.Contains(notes, "topology.filevol.csi.io/pool=shared)") || !strings.Contains(notes, "files in\n/var/lib/filevol/pool and /mnt/filevol-shared stay") {
		t.Errorf("NOTES lack the shared pool's topology key or where the volumes stay:\n%s", notes)
	}
	notes = render(t, sharedOn+"localPool: {enabled: false}\n").Notes
	for _, not := range []string{"storageClassName: filevol", "(filevol.csi.io)", "--enable-distributed-snapshotting", "/var/lib/filevol/pool"} {
		if strings.Contains(notes, not) {
			t.Errorf("NOTES of the shared driver alone mention %q:\n%s", not, notes)
		}
	}
	// A second shared driver (a release of its own) has a topology key of its own.
	notes = render(t, sharedOn+"localPool: {enabled: false}\nsharedPool: {enabled: true, driverName: ceph.filevol.csi.io, name: ceph}\n").Notes
	if !strings.Contains(notes, "topology.ceph.filevol.csi.io/pool=ceph)") {
		t.Errorf("NOTES of ceph.filevol.csi.io lack its topology key topology.ceph.filevol.csi.io/pool:\n%s", notes)
	}
}

// TestCgroupHostPath: without the host's cgroups the node pods record I/O
// limits and enforce none (--cgroup-roots empty), and mount nothing of it.
func TestCgroupHostPath(t *testing.T) {
	spec := &daemonSet(t, render(t, sharedOn+"cgroupHostPath: \"\"\n")).Spec.Template.Spec
	for _, name := range []string{"filevol", "filevol-shared"} {
		c := container(t, spec, name)
		wantArg(t, c, "--cgroup-roots", "")
		if mount(c, "cgroup") != nil {
			t.Errorf("%s mounts the cgroups with cgroupHostPath empty", name)
		}
	}
	if volume(spec, "cgroup") != nil {
		t.Error("cgroup volume with cgroupHostPath empty")
	}
	if err := renderErr(t, "cgroupHostPath: relative/path\n"); err == nil {
		t.Error("a relative cgroupHostPath was accepted")
	}
}
