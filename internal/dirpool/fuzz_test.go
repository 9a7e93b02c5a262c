package dirpool

import (
	"strings"
	"testing"
)

// FuzzParameters: whatever a StorageClass and a claim hold, the path of a
// volume is either refused or a plain relative path of checked components
// that cannot leave the pool or reach its metadata.
func FuzzParameters(f *testing.F) {
	for _, s := range [][4]string{
		{"", "${.PV.name}", "default", "data"},
		{"a/b", "${.PVC.namespace}/${.PVC.name}", "ns", "pvc"},
		{"../x", "${.PVC.name}", "..", "../../etc"},
		{".filevol", "x", "a", "b"},
		{"/", "${.PVC.namespace}/../${.PVC.name}", "a\x00", strings.Repeat("n", 300)},
		{"a//b", "${.PVC.name", "ns", "x/y"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, base, pattern, ns, name string) {
		p, err := Parameters(map[string]string{ParamBasePath: base, ParamSubPathPattern: pattern,
			ParamPVCNamespace: ns, ParamPVCName: name})
		if err != nil {
			return
		}
		path, err := p.Path("pvc-1", "fv1-dir-00000000-0123456789abcdef0123456789abcdef")
		if err != nil {
			return
		}
		if path == "" || len(path) > maxPathLen || strings.HasPrefix(path, "/") || strings.ContainsRune(path, 0) {
			t.Fatalf("path %q", path)
		}
		for _, c := range strings.Split(path, "/") {
			if c == "" || c == "." || c == ".." || strings.HasPrefix(c, ".") || len(c) > maxComponentLen {
				t.Fatalf("path %q has component %q", path, c)
			}
		}
	})
}
