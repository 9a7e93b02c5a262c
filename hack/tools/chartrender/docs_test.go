package chartrender

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
)

// yamlBlocks returns the ```yaml blocks of docs/quickstart.md.
func yamlBlocks(t *testing.T) []string {
	t.Helper()
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chart, "..", "..", "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestQuickstart: the values file in the quick start installs, and every
// manifest it tells people to apply is valid.
func TestQuickstart(t *testing.T) {
	var values, manifests int
	for _, block := range yamlBlocks(t) {
		if strings.HasPrefix(block, "# my-values.yaml") {
			values++
			r := render(t, block)
			if sc := r.Find("StorageClass", "filevol-xfs-thick"); sc == nil ||
				sc.Typed.(*storagev1.StorageClass).Parameters["csi.storage.k8s.io/fstype"] != "xfs" {
				t.Errorf("the quick start's values do not make the xfs class")
			}
			continue
		}
		objs, err := Split(block)
		if err != nil {
			t.Errorf("quick start manifest does not decode: %v\n%s", err, block)
			continue
		}
		for _, o := range objs {
			manifests++
			if o.Typed == nil && o.Kind != "VolumeSnapshot" {
				t.Errorf("unknown kind %s in the quick start", o.Kind)
			}
		}
	}
	if values != 1 || manifests < 4 {
		t.Errorf("found %d values files and %d manifests in docs/quickstart.md", values, manifests)
	}
}
