package app

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/metrics"
	"github.com/filevol/filevol/internal/nodeview"
	"github.com/filevol/filevol/internal/nodeview/api"
	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/pool/imagenode"
	"github.com/filevol/filevol/internal/volume"
)

// The HTTP endpoint serves health, metrics and the node view, whose health
// is the driver's own NodeGetVolumeHealth.
func TestHTTPEndpoint(t *testing.T) {
	p, err := pool.Open(filepath.Join(t.TempDir(), "pool"), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	v, err := p.Create(t.Context(), volume.CreateRequest{Name: "a", CapacityBytes: 8 << 20, FSType: "ext4"})
	if err != nil {
		t.Fatal(err)
	}
	// Used (its image made and committed, as a stage does), then lost.
	if _, err := p.CommitImage(v); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.ImagePath(v.ID)); err != nil {
		t.Fatal(err)
	}
	h := fake.New().Host()
	d := csi.New(csi.Config{DriverName: "filevol.csi.io", NodeID: "n1", Controller: true, Node: true}, p, h, imagenode.New(p, h, "n1", false))
	view := &nodeview.Builder{Node: "n1", Driver: "filevol.csi.io", Pool: p, Kernel: fake.New().Host(), Health: volumeHealth(d)}
	srv := httptest.NewServer(httpMux(func() error { return nil }, metrics.New(metrics.Config{View: view}), view))
	defer srv.Close()

	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		return string(b)
	}
	if got := get("/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	if m := get("/metrics"); !strings.Contains(m, `filevol_volumes{state="idle"} 1`) || !strings.Contains(m, "go_goroutines") {
		t.Errorf("/metrics lacks the volume gauge or the runtime metrics:\n%s", m)
	}
	var r api.Report
	if err := json.Unmarshal([]byte(get(api.Path)), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Volumes) != 1 || len(r.Volumes[0].Health) != 1 || r.Volumes[0].Health[0].Reason != volume.ReasonImageMissing ||
		r.Volumes[0].Health[0].Status != "DATA_LOSS" {
		t.Errorf("/debug/volumes = %+v, want one volume with ImageMissing (DATA_LOSS)", r.Volumes)
	}
}

// A node opens a shared pool as its node, a controller as its controller
// ID, apart from every node's; a node-local pool as it always was.
func TestPoolOptions(t *testing.T) {
	o := options.Options{NodeID: "n1", ControllerID: "main", Mode: options.ModeNode, PoolShared: true, ReservedCapacity: 42}
	if po := poolOptions(o); !po.Shared || po.Owner != "" || po.NodeID != "n1" || po.ReservedBytes != 42 {
		t.Errorf("node: %+v", po)
	}
	o.Mode = options.ModeController
	if po := poolOptions(o); po.Owner != "controller/main" {
		t.Errorf("controller: %+v", po)
	}
	o.Mode, o.PoolShared = options.ModeAll, false
	if po := poolOptions(o); po.Shared || po.Owner != "" {
		t.Errorf("node-local: %+v", po)
	}
}
