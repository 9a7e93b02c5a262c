package chartrender

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestE2EValues: hack/tools/e2e/values-e2e.yaml installs on the project's
// cluster, so every image it needs must be one hack/images.sh builds (the
// cluster has no registry), and every pod must share the host's network.
// It installs the shared-pool driver too.
func TestE2EValues(t *testing.T) {
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chart, "..", "..", "hack", "tools", "e2e", "values-e2e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// up.sh applies the SnapshotMetadataService CRD too.
	r := renderOn(t, string(b), cbtAPIs)
	built := []string{ // hack/images.sh
		"ghcr.io/filevol/filevol:v0.1.0",
		"registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
		"registry.k8s.io/sig-storage/csi-resizer:v2.3.0",
		"registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0",
		"registry.k8s.io/sig-storage/csi-attacher:v4.13.0",
		"registry.k8s.io/sig-storage/csi-snapshot-metadata:v1.1.0",
	}
	shared := sharedDeployment(t, r)
	for _, spec := range [][]string{containerImages(&daemonSet(t, r).Spec.Template.Spec), containerImages(&deployment(t, r).Spec.Template.Spec),
		containerImages(&shared.Spec.Template.Spec)} {
		for _, img := range spec {
			if !slices.Contains(built, img) {
				t.Errorf("image %s is not built by hack/images.sh", img)
			}
		}
	}
	if !daemonSet(t, r).Spec.Template.Spec.HostNetwork || !deployment(t, r).Spec.Template.Spec.HostNetwork || !shared.Spec.Template.Spec.HostNetwork {
		t.Error("e2e pods do not share the host's network")
	}
	if n := r.Kinds()["StorageClass"]; n != 6 {
		t.Errorf("%d StorageClasses, want ext4, xfs and btrfs, and the shared driver's ext4, xfs and directory ones", n)
	}
	// The directory pool (chart.sh install mounts a btrfs there) under the
	// state directory, served by the shared driver's two filevols.
	if hp := hostPaths(&shared.Spec.Template.Spec)["shared-dir-pool"]; hp != "/var/lib/filevol-e2e/dir-pool Directory" {
		t.Errorf("dir pool %q", hp)
	}
	if sc := r.Find("StorageClass", "filevol-dir"); sc == nil || sc.Map["parameters"].(map[string]any)["provisioningMode"] != "directory" {
		t.Errorf("StorageClass filevol-dir %v", sc)
	}
	// Group snapshots on the one node: the snapshotter in the controller
	// Deployment, a VolumeGroupSnapshotClass for each driver, and the
	// suite's VolumeAttributesClass.
	// Changed-block tracking beside both controllers, at addresses a client
	// on the host reaches without kube-proxy.
	if !hasContainer(&deployment(t, r).Spec.Template.Spec, "csi-snapshot-metadata") || !hasContainer(&shared.Spec.Template.Spec, "csi-snapshot-metadata") {
		t.Error("csi-snapshot-metadata does not run beside both controllers")
	}
	for driver, addr := range map[string]string{"filevol.csi.io": "127.0.0.1:19818", "shared.filevol.csi.io": "127.0.0.1:19820"} {
		if o := r.Find("SnapshotMetadataService", driver); o == nil || o.Map["spec"].(map[string]any)["address"] != addr {
			t.Errorf("SnapshotMetadataService %s: %v, want address %s", driver, o, addr)
		}
	}
	if hasContainer(&daemonSet(t, r).Spec.Template.Spec, "csi-snapshotter") || !hasContainer(&deployment(t, r).Spec.Template.Spec, "csi-snapshotter") {
		t.Error("the node-local driver's csi-snapshotter is not (only) in the controller Deployment")
	}
	for _, name := range []string{"filevol", "filevol-shared"} {
		if r.Find("VolumeGroupSnapshotClass", name) == nil {
			t.Errorf("no VolumeGroupSnapshotClass %s (test/e2e/testdriver*.yaml name it)", name)
		}
	}
	if r.Find("VolumeAttributesClass", "filevol-e2e") == nil {
		t.Error("no VolumeAttributesClass filevol-e2e (test/e2e/testdriver.yaml names it)")
	}
	// The shared pool is under the cluster's state directory, so that
	// down.sh detaches what is left of it.
	if hp := hostPaths(&shared.Spec.Template.Spec)["shared-pool"]; hp != "/var/lib/filevol-e2e/shared-pool Directory" {
		t.Errorf("shared pool %q", hp)
	}
}
