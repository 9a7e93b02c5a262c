package chartrender

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestDeployDrift fails when deploy/ is not what the chart renders now:
// run hack/render-deploy.sh and commit the result.
func TestDeployDrift(t *testing.T) {
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Drift(chart, filepath.Join(chart, "..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("deploy/%s", p)
	}
	if len(problems) > 0 {
		t.Log("regenerate with hack/render-deploy.sh")
	}
}

// TestDeployImage: `make deploy IMAGE=...` (RenderDeployImage) puts the
// pushed image in every filevol container of every deploy/ variant, and
// nothing else changes: the sidecars keep their official images, a
// repository without a tag gets the chart's v<appVersion>.
func TestDeployImage(t *testing.T) {
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := RenderDeploy(chart)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := loader.Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	for image, want := range map[string]string{
		"127.0.0.1:5000/filevol:v9.9.9":      "127.0.0.1:5000/filevol:v9.9.9",
		"registry.example:5000/team/filevol": "registry.example:5000/team/filevol:v" + meta.Metadata.AppVersion,
	} {
		files, err := RenderDeployImage(chart, image)
		if err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			s := string(content)
			old := "ghcr.io/filevol/filevol:v" + meta.Metadata.AppVersion
			n := strings.Count(string(plain[name]), "image: "+old)
			if n == 0 || strings.Count(s, "image: "+want+"\n") != n || strings.Contains(s, "ghcr.io/filevol") {
				t.Errorf("%s with %s: %d of %d filevol images are %s", name, image, strings.Count(s, "image: "+want+"\n"), n, want)
			}
			body := strings.SplitN(s, "\n---", 2)[1]
			plainBody := strings.SplitN(string(plain[name]), "\n---", 2)[1]
			if strings.ReplaceAll(body, want, old) != plainBody {
				t.Errorf("%s with %s differs from deploy/ in more than the image", name, image)
			}
		}
	}
	for _, bad := range []string{"a b", "x@sha256:00", ":v1"} {
		if _, err := RenderDeployImage(chart, bad); err == nil {
			t.Errorf("image %q accepted", bad)
		}
	}
}
