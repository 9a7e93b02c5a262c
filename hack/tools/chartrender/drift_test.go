package chartrender

import (
	"path/filepath"
	"testing"
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
