package chartrender

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// TestMultinodeValues: test/e2e/multinode/run.sh installs with
// values-e2e.yaml and then its own values.yaml on top, as helm merges them.
// Both must still render together: a value the single-node file gained (the
// central snapshotter, which needs a pool every node shares) once made the
// multi-node install fail at helm's first step. The multi-node cluster has a
// directory pool too (one btrfs on every node), so the directory class.
func TestMultinodeValues(t *testing.T) {
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(chart, "..", "..")
	load := func(rel string) map[string]any {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		return m
	}
	// The later file wins, as with helm's -f a -f b.
	merged := chartutil.CoalesceTables(load("test/e2e/multinode/values.yaml"), load("hack/tools/e2e/values-e2e.yaml"))
	b, err := yaml.Marshal(merged)
	if err != nil {
		t.Fatal(err)
	}
	r := render(t, string(b))
	if !hasContainer(&daemonSet(t, r).Spec.Template.Spec, "csi-snapshotter") {
		t.Error("each node has a pool of its own, but the node DaemonSet runs no csi-snapshotter")
	}
	// The directory pool: one btrfs run.sh mounts at the same path on every node.
	if r.Find("StorageClass", "filevol-dir") == nil {
		t.Error("the multi-node values enable the directory pool, but no StorageClass filevol-dir rendered")
	}
	found := false
	for _, c := range daemonSet(t, r).Spec.Template.Spec.Containers {
		if c.Name == "filevol-shared" && slices.Contains(c.Args, "--dir-pool-dir=/var/lib/filevol-e2e/dir-pool") {
			found = true
		}
	}
	if !found {
		t.Error("the node DaemonSet's filevol-shared has no --dir-pool-dir=/var/lib/filevol-e2e/dir-pool")
	}
	// The GlusterFS volume is on TLS: required, and its files installed from the Secret.
	shared := container(t, &daemonSet(t, r).Spec.Template.Spec, "filevol-shared")
	wantArg(t, shared, "--shared-pool-require", "tls")
	wantArg(t, shared, "--shared-pool-tls-secret-dir", "/etc/filevol/shared-pool-tls")
	if v := volume(&daemonSet(t, r).Spec.Template.Spec, "shared-pool-tls-secret"); v == nil || v.Secret == nil || v.Secret.SecretName != "fvmn-gluster-tls" {
		t.Errorf("the multi-node values' TLS Secret volume: %+v", v)
	}
}
