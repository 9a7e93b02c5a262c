package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/metrics"
	"github.com/filevol/filevol/internal/nodeview"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

func TestScrapeAfterCalls(t *testing.T) {
	dir := t.TempDir()
	p, err := pool.Open(filepath.Join(dir, "pool"), pool.Options{NodeID: "n1", ReservedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	host := fake.New()
	d := csi.New(csi.Config{DriverName: "filevol.csi.io", Version: "test", NodeID: "n1", Controller: true}, p, host.Host(), nil)
	view := &nodeview.Builder{Node: "n1", Driver: "filevol.csi.io", Pool: p, Kernel: host.Host()}
	m := metrics.New(metrics.Config{View: view, Snapshots: func() (int, error) { return 2, nil }})

	sock := filepath.Join(dir, "csi.sock")
	lis, err := csi.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := csi.NewGRPCServer(m)
	d.Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- csi.Serve(ctx, srv, lis, time.Second) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cc := csipb.NewControllerClient(conn)

	mountCap := []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	var ids []string
	for _, name := range []string{"a", "b"} {
		params := map[string]string{nodeview.ParamPVName: "pv-" + name, nodeview.ParamPVCNamespace: "ns", nodeview.ParamPVCName: "claim-" + name}
		if name == "b" {
			params[csi.ParamEncryption] = volume.EncryptionFscrypt // encrypted at rest
		}
		r, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: mountCap,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}, Parameters: params})
		if err != nil {
			t.Fatalf("CreateVolume: %v", err)
		}
		ids = append(ids, r.GetVolume().GetVolumeId())
	}
	if _, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "", VolumeCapabilities: mountCap}); err == nil {
		t.Fatal("CreateVolume without a name succeeded")
	}
	if _, err := cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: "fv-" + strings.Repeat("0", 32)}); err != nil {
		t.Fatalf("DeleteVolume of an unknown volume: %v", err)
	}

	// The kernel shows volume a staged and published.
	img := p.ImagePath(ids[0])
	staging, target := dir+"/kubelet/globalmount", dir+"/kubelet/pods/0b7e2c1a-5d4f-4c3b-9a8e-1f2d3c4b5a69/volumes/kubernetes.io~csi/pv-a/mount"
	host.AddDevice(loop.Device{Path: "/dev/loop7", Number: 7, BackingFile: img, Major: 7, Minor: 7, SizeBytes: 16 << 20})
	host.AddMount(mount.Info{Major: 7, Minor: 7, Root: "/", MountPoint: staging, FSType: "ext4", Source: "/dev/loop7"})
	host.AddMount(mount.Info{Major: 7, Minor: 7, Root: "/", MountPoint: target, FSType: "ext4", Source: "/dev/loop7"})
	host.SetStats(img, fs.Stats{TotalBytes: 15 << 20, UsedBytes: 3 << 20})
	m.SetOrphans(1)
	m.SetSweepDuration(250 * time.Millisecond)

	got := scrape(t, m.Handler())
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"filevol_csi_calls_total", map[string]string{"service": "csi.v1.Controller", "method": "CreateVolume", "code": "OK"}, 2},
		{"filevol_csi_calls_total", map[string]string{"service": "csi.v1.Controller", "method": "CreateVolume", "code": "InvalidArgument"}, 1},
		{"filevol_csi_calls_total", map[string]string{"service": "csi.v1.Controller", "method": "DeleteVolume", "code": "OK"}, 1},
		{"filevol_csi_call_duration_seconds", map[string]string{"service": "csi.v1.Controller", "method": "CreateVolume"}, 3}, // sample count
		{"filevol_pool_reserved_bytes", nil, 1 << 20},
		{"filevol_pool_provisioned_bytes", nil, 32 << 20},
		{"filevol_volumes", map[string]string{"state": "published"}, 1},
		{"filevol_volumes", map[string]string{"state": "idle"}, 1},
		{"filevol_volumes_encrypted", nil, 1},
		{"filevol_snapshots", nil, 2},
		{"filevol_loop_devices", nil, 1},
		{"filevol_orphans", nil, 1},
		{"filevol_gc_sweep_duration_seconds", nil, 0.25},
		{"filevol_quarantined_images", nil, 0},
		{"filevol_volume_used_bytes", map[string]string{"volume_id": ids[0], "persistentvolume": "pv-a", "namespace": "ns", "persistentvolumeclaim": "claim-a"}, 3 << 20},
		{"filevol_volume_capacity_bytes", map[string]string{"volume_id": ids[0]}, 15 << 20},
		{"filevol_metrics_collect_errors", nil, 0},
	}
	for _, w := range want {
		v, ok := find(got, w.name, w.labels)
		if !ok {
			t.Errorf("no series %s%v", w.name, w.labels)
			continue
		}
		if v != w.value {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, v, w.value)
		}
	}
	for _, name := range []string{"filevol_pool_capacity_bytes", "filevol_pool_free_bytes", "filevol_pool_used_bytes", "filevol_pool_available_bytes"} {
		if v, ok := find(got, name, nil); !ok || v <= 0 {
			t.Errorf("%s = %v (present %v), want > 0", name, v, ok)
		}
	}
	if _, ok := find(got, "filevol_volume_used_bytes", map[string]string{"volume_id": ids[1]}); ok {
		t.Errorf("filevol_volume_used_bytes for the idle volume %s", ids[1])
	}
}

// scrape GETs /metrics as Prometheus would and parses the text format.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + metrics.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// find returns the value of the first series of name whose labels include
// want (a histogram's sample count).
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}
