package chartrender

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

const dirPoolOn = `sharedPool:
  enabled: true
  dirPool: {enabled: true, hostPath: /mnt/dirs}
  storageClasses:
    - name: filevol-shared
    - name: filevol-dir
      parameters: {provisioningMode: directory, basePath: k8s, subPathPattern: "${.PVC.namespace}/${.PVC.name}"}
`

// The shared driver's directory pool: both of its filevols serve it
// (--dir-pool-dir, the hostPath mounted at the same path), the provisioner
// passes the claim's name and namespace and no default filesystem type.
func TestSharedDirPool(t *testing.T) {
	r := render(t, dirPoolOn)
	ctrl := &sharedDeployment(t, r).Spec.Template.Spec
	node := &daemonSet(t, r).Spec.Template.Spec
	for _, c := range []*corev1.Container{container(t, ctrl, "filevol"), container(t, node, "filevol-shared")} {
		wantArg(t, c, "--dir-pool-dir", "/mnt/dirs")
		wantArg(t, c, "--pool-shared", "")
		if m := mount(c, "shared-dir-pool"); m == nil || m.MountPath != "/mnt/dirs" {
			t.Errorf("%s: dir pool mount %+v", c.Name, m)
		}
	}
	noArg(t, container(t, node, "filevol"), "--dir-pool-dir")
	for _, spec := range []*corev1.PodSpec{ctrl, node} {
		if hp := hostPaths(spec)["shared-dir-pool"]; hp != "/mnt/dirs Directory" {
			t.Errorf("dir pool volume %q", hp)
		}
	}
	p := container(t, ctrl, "csi-provisioner")
	wantArg(t, p, "--extra-create-metadata", "")
	noArg(t, p, "--default-fstype")
	// The controller's filevol: the capabilities of subvolumes, qgroups and
	// ownership, nothing more, and still no privilege.
	fv := container(t, ctrl, "filevol")
	sc := fv.SecurityContext
	if sc == nil || sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"SYS_ADMIN", "CHOWN", "FOWNER", "DAC_OVERRIDE", "DAC_READ_SEARCH", "LINUX_IMMUTABLE"}) {
		t.Errorf("controller filevol security context %+v", sc)
	}

	dir := r.Find("StorageClass", "filevol-dir").Typed.(*storagev1.StorageClass)
	want := map[string]string{"provisioningMode": "directory", "basePath": "k8s", "subPathPattern": "${.PVC.namespace}/${.PVC.name}"}
	if dir.Provisioner != "shared.filevol.csi.io" || len(dir.Parameters) != len(want) {
		t.Errorf("filevol-dir %s %v", dir.Provisioner, dir.Parameters)
	}
	for k, v := range want {
		if dir.Parameters[k] != v {
			t.Errorf("filevol-dir parameter %s=%q, want %q", k, dir.Parameters[k], v)
		}
	}
	img := r.Find("StorageClass", "filevol-shared").Typed.(*storagev1.StorageClass)
	if img.Parameters["csi.storage.k8s.io/fstype"] != "ext4" {
		t.Errorf("image class without its filesystem type (the provisioner has no default now): %v", img.Parameters)
	}
}

// Off by default: nothing of it rendered, the provisioner as before.
func TestSharedDirPoolOff(t *testing.T) {
	r := render(t, sharedOn)
	if strings.Contains(r.Manifest, "dir-pool") {
		t.Error("a dir pool rendered while sharedPool.dirPool.enabled is false")
	}
	wantArg(t, container(t, &sharedDeployment(t, r).Spec.Template.Spec, "csi-provisioner"), "--default-fstype", "ext4")
}

func TestDirPoolRefused(t *testing.T) {
	for values, want := range map[string]string{
		// A directory class with no directory pool to serve it.
		"sharedPool:\n  enabled: true\n  storageClasses:\n    - {name: d, parameters: {provisioningMode: directory}}\n": "set sharedPool.dirPool.enabled=true",
		// The node-local driver has none in the chart.
		"storageClasses:\n  - {name: d, parameters: {provisioningMode: directory}}\n": "served by the shared-pool driver",
		// One directory, two pools.
		"sharedPool: {enabled: true, hostPath: /mnt/x, dirPool: {enabled: true, hostPath: /mnt/x/}}\n": "must differ",
		"sharedPool: {enabled: true, dirPool: {enabled: true, hostPath: relative}}\n":                  "hostPath",
	} {
		err := renderErr(t, values)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: error %v, want it to say %q", values, err, want)
		}
	}
}

// Extra parameters of an image class go to the StorageClass as they are.
func TestStorageClassParameters(t *testing.T) {
	r := render(t, "storageClasses:\n  - {name: limited, fsType: xfs, parameters: {writeIOPS: \"100\"}}\n")
	sc := r.Find("StorageClass", "limited").Typed.(*storagev1.StorageClass)
	if sc.Parameters["writeIOPS"] != "100" || sc.Parameters["csi.storage.k8s.io/fstype"] != "xfs" || sc.Parameters["provisioning"] != "thin" {
		t.Errorf("parameters %v", sc.Parameters)
	}
}

// On CephFS the shared driver's filevols read the ceph-fuse clients'
// admin sockets: the node's directory of them, read-only at /run/ceph,
// only when asked for.
func TestCephAdminSockets(t *testing.T) {
	r := render(t, "sharedPool: {enabled: true, cephAdminSocketDir: /var/run/ceph}\n")
	ctrl := &sharedDeployment(t, r).Spec.Template.Spec
	node := &daemonSet(t, r).Spec.Template.Spec
	for _, c := range []*corev1.Container{container(t, ctrl, "filevol"), container(t, node, "filevol-shared")} {
		if m := mount(c, "ceph-admin-sockets"); m == nil || m.MountPath != "/run/ceph" || !m.ReadOnly {
			t.Errorf("%s: admin socket mount %+v", c.Name, m)
		}
	}
	if mount(container(t, node, "filevol"), "ceph-admin-sockets") != nil {
		t.Error("the node-local filevol mounts the ceph admin sockets")
	}
	for _, spec := range []*corev1.PodSpec{ctrl, node} {
		if hp := hostPaths(spec)["ceph-admin-sockets"]; hp != "/var/run/ceph Directory" {
			t.Errorf("admin socket volume %q", hp)
		}
	}
	if strings.Contains(render(t, sharedOn).Manifest, "ceph-admin-sockets") {
		t.Error("admin sockets mounted without sharedPool.cephAdminSocketDir")
	}
}

// sharedPool.requireTLS puts --shared-pool-require=tls on the shared
// driver's filevols (controller and node), never on the node-local one,
// and nothing when off.
func TestSharedPoolRequireTLS(t *testing.T) {
	r := render(t, "sharedPool: {enabled: true, requireTLS: true}\n")
	ctrl := &sharedDeployment(t, r).Spec.Template.Spec
	node := &daemonSet(t, r).Spec.Template.Spec
	for _, c := range []*corev1.Container{container(t, ctrl, "filevol"), container(t, node, "filevol-shared")} {
		wantArg(t, c, "--shared-pool-require", "tls")
	}
	noArg(t, container(t, node, "filevol"), "--shared-pool-require")
	off := render(t, sharedOn)
	noArg(t, container(t, &sharedDeployment(t, off).Spec.Template.Spec, "filevol"), "--shared-pool-require")
	noArg(t, container(t, &daemonSet(t, off).Spec.Template.Spec, "filevol-shared"), "--shared-pool-require")
	if err := renderErr(t, "sharedPool: {enabled: true, requireTLS: \"yes\"}\n"); err == nil {
		t.Error("requireTLS: \"yes\" accepted")
	}
	// The directory pool's own: unset, as the image pool's (no flag); set, its own.
	dir := func(values string) *corev1.Container {
		return container(t, &daemonSet(t, render(t, values)).Spec.Template.Spec, "filevol-shared")
	}
	noArg(t, dir("sharedPool: {enabled: true, requireTLS: true, dirPool: {enabled: true}}\n"), "--dir-pool-require")
	wantArg(t, dir("sharedPool: {enabled: true, requireTLS: true, dirPool: {enabled: true, requireTLS: false}}\n"), "--dir-pool-require", "none")
	wantArg(t, dir("sharedPool: {enabled: true, dirPool: {enabled: true, requireTLS: true}}\n"), "--dir-pool-require", "tls")
	wantArg(t, container(t, &sharedDeployment(t, render(t, "sharedPool: {enabled: true, dirPool: {enabled: true, requireTLS: true}}\n")).Spec.Template.Spec, "filevol"), "--dir-pool-require", "tls")
}
