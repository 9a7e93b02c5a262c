// Package chartrender renders the filevol Helm chart with the Helm SDK the
// way `helm install --dry-run` does (schema validation, NOTES, install
// order), without a cluster. The chart tests and hack/render-deploy.sh
// (deploy/) use it. It lives in the hack/tools module so that the driver's
// go.mod never depends on Helm.
package chartrender

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// KubeVersion is the Kubernetes version the chart is rendered for: the e2e
// cluster's minor version, so Capabilities are stable across machines.
const KubeVersion = "v1.36.0"

// Object is one rendered manifest document.
type Object struct {
	APIVersion, Kind, Name, Namespace string
	// Source is the template that produced it ("filevol/templates/...").
	Source string
	// Typed is the object decoded strictly into its client-go type (an
	// unknown field is an error), or nil for kinds client-go does not know.
	Typed runtime.Object
	// Map is the document as generic YAML.
	Map map[string]any
}

// Result is a rendered release.
type Result struct {
	Manifest string
	Notes    string
	Objects  []Object
}

// ChartDir finds charts/filevol by walking up from the working directory.
func ChartDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		c := filepath.Join(dir, "charts", "filevol")
		if _, err := os.Stat(filepath.Join(c, "Chart.yaml")); err == nil {
			return c, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("charts/filevol/Chart.yaml not found above the working directory")
		}
		dir = parent
	}
}

// SnapshotAPIs are the API versions a cluster with external-snapshotter's
// CRDs adds to its discovery for the classes the chart makes, as `helm
// template --api-versions` takes them: the VolumeSnapshot ones and the
// VolumeGroupSnapshot ones. The chart's snapshots.enabled=auto renders the
// snapshot objects only where they are listed (SnapshotAPIs[:2]: volume
// snapshots without group snapshots).
var SnapshotAPIs = []string{
	"snapshot.storage.k8s.io/v1",
	"snapshot.storage.k8s.io/v1/VolumeSnapshotClass",
	"groupsnapshot.storage.k8s.io/v1",
	"groupsnapshot.storage.k8s.io/v1/VolumeGroupSnapshotClass",
}

// Render renders the chart in chartDir as release name in namespace with the
// given values (YAML, merged over values.yaml like `helm install -f`), as
// `helm template` does: no cluster, so no API beyond Helm's built-in list
// (snapshots.enabled=auto renders no snapshot object).
func Render(chartDir, name, namespace, valuesYAML string) (*Result, error) {
	return RenderOn(chartDir, name, namespace, valuesYAML, nil)
}

// RenderOn renders like Render for a cluster that also serves apiVersions
// (`helm template --api-versions`: "group/version" and
// "group/version/Kind" entries), which the chart sees in
// .Capabilities.APIVersions.
func RenderOn(chartDir, name, namespace, valuesYAML string, apiVersions []string) (*Result, error) {
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	return renderWith(chartDir, name, namespace, valuesYAML, nil, func(i *action.Install) {
		i.KubeVersion = kv
		i.APIVersions = apiVersions
	})
}

// renderWith renders like Render with cfg (nil: an empty one) and the
// install action as setup leaves it. Without setup the render is `helm
// template` with no flags: client-only, the SDK's default capabilities.
func renderWith(chartDir, name, namespace, valuesYAML string, cfg *action.Configuration, setup func(*action.Install)) (*Result, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValues([]byte(valuesYAML))
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	if cfg == nil {
		cfg = &action.Configuration{}
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly = true, true
	inst.ReleaseName, inst.Namespace = name, namespace
	if setup != nil {
		setup(inst)
	}
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	objs, err := Split(rel.Manifest)
	if err != nil {
		return nil, err
	}
	return &Result{Manifest: rel.Manifest, Notes: rel.Info.Notes, Objects: objs}, nil
}

var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// Split decodes a multi-document manifest. Documents of kinds client-go
// knows are decoded strictly, so a misspelled field in a template fails.
func Split(manifest string) ([]Object, error) {
	var out []Object
	for _, doc := range strings.Split(manifest, "\n---") {
		doc = strings.TrimPrefix(doc, "---")
		source := ""
		for _, line := range strings.Split(doc, "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok {
				source = s
			}
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if len(m) == 0 {
			continue
		}
		o := Object{Source: source, Map: m}
		o.APIVersion, _ = m["apiVersion"].(string)
		o.Kind, _ = m["kind"].(string)
		if md, ok := m["metadata"].(map[string]any); ok {
			o.Name, _ = md["name"].(string)
			o.Namespace, _ = md["namespace"].(string)
		}
		typed, _, err := strict.Decode([]byte(doc), nil, nil)
		switch {
		case err == nil:
			o.Typed = typed
		case runtime.IsNotRegisteredError(err):
		default:
			return nil, fmt.Errorf("%s (%s %s): %w", source, o.Kind, o.Name, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Find returns the object of that kind and name, or nil.
func (r *Result) Find(kind, name string) *Object {
	for i := range r.Objects {
		if r.Objects[i].Kind == kind && r.Objects[i].Name == name {
			return &r.Objects[i]
		}
	}
	return nil
}

// Kinds counts the rendered objects by kind.
func (r *Result) Kinds() map[string]int {
	n := map[string]int{}
	for _, o := range r.Objects {
		n[o.Kind]++
	}
	return n
}

// WriteYAML writes objects as one YAML stream (used for the Namespace of deploy/).
func WriteYAML(w io.Writer, docs ...any) error {
	var b bytes.Buffer
	for _, d := range docs {
		y, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	_, err := w.Write(b.Bytes())
	return err
}
