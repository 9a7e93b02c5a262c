package chartrender

import (
	"os"
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// TestMultinodeValues: test/e2e/multinode/run.sh installs with
// values-e2e.yaml and then its own values.yaml on top, as helm merges them.
// Both must still render together: a value the single-node file gained (the
// central snapshotter, which needs a pool every node shares) once made the
// multi-node install fail at helm's first step.
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
	if r.Find("StorageClass", "filevol-dir") != nil {
		t.Error("StorageClass filevol-dir rendered, but the multi-node cluster has no directory pool")
	}
}
