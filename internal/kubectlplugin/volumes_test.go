package kubectlplugin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// twoVolumes: a published filesystem volume and a staged block volume on
// node-1, whose driver answers.
func twoVolumes() ([]runtime.Object, fakeViewer) {
	block := pv("pvc-blk", "fv-blk", "node-1", "db", "raw")
	block.Spec.VolumeMode = ptr(corev1.PersistentVolumeBlock)
	objs := append(base(),
		pv("pvc-web", "fv-web", "node-1", "app", "web-data"), pvc("app", "web-data", "1Gi", "pvc-web"), pod("app", "web-0", "node-1", "web-data"),
		block, pvc("db", "raw", "1Gi", "pvc-blk"))
	created := now.Add(-24 * time.Hour)
	views := fakeViewer{"node-1": {Node: "node-1", PoolDir: "/var/lib/filevol/pool", Volumes: []api.Volume{
		{Record: api.Record{ID: "fv-web", CapacityBytes: 1 << 30, FSType: "ext4", Provisioning: "thin", Node: "node-1", CreatedAt: created},
			PV: "pvc-web", State: api.StatePublished,
			Image:       api.Image{Path: "/var/lib/filevol/pool/volumes/fv-web.img", Exists: true, SizeBytes: 1 << 30, AllocatedBytes: 80 << 20},
			LoopDevices: []api.LoopDevice{{Path: "/dev/loop3", DirectIO: true, SizeBytes: 1 << 30}},
			Staging:     []api.Mount{{Path: "/var/lib/kubelet/plugins/kubernetes.io/csi/filevol.csi.io/0a1b/globalmount", FSType: "ext4", Device: "/dev/loop3"}},
			Targets:     []api.Mount{{Path: "/var/lib/kubelet/pods/uid-web-0/volumes/kubernetes.io~csi/pvc-web/mount", FSType: "ext4", Device: "/dev/loop3", PodUID: "uid-web-0"}},
			Usage:       &api.Usage{TotalBytes: 975 << 20, UsedBytes: 52 << 20, AvailableBytes: 856 << 20}},
		{Record: api.Record{ID: "fv-blk", CapacityBytes: 1 << 30, Provisioning: "thick", Node: "node-1", CreatedAt: created},
			PV: "pvc-blk", State: api.StateStaged,
			Image: api.Image{Path: "/var/lib/filevol/pool/volumes/fv-blk.img", Exists: true, SizeBytes: 1 << 30, AllocatedBytes: 1 << 30}},
	}}}
	return objs, views
}

func TestVolumesTable(t *testing.T) {
	objs, views := twoVolumes()
	golden(t, "volumes.golden", run(t, views, []string{"volumes"}, objs...))
}

func TestVolumesWithoutNodeView(t *testing.T) {
	objs, _ := twoVolumes()
	out := run(t, nil, []string{"volumes"}, objs...)
	mustContain(t, out, "pvc-blk   db", "1Gi    -      Block/RWO", "Bound    ?")
}

func TestVolumesJSONAndYAML(t *testing.T) {
	objs, views := twoVolumes()
	var rows []VolumeRow
	if err := json.Unmarshal([]byte(run(t, views, []string{"volumes", "-o", "json"}, objs...)), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].PV != "pvc-web" || rows[1].UsedBytes != 52<<20 || rows[1].State != "published" || rows[1].Node != "node-1" || rows[1].PVC != "web-data" {
		t.Errorf("json rows = %+v", rows)
	}
	var yrows []VolumeRow
	if err := yaml.Unmarshal([]byte(run(t, views, []string{"volumes", "-o", "yaml"}, objs...)), &yrows); err != nil || len(yrows) != 2 {
		t.Errorf("yaml rows = %+v, %v", yrows, err)
	}
}

func TestDescribePVC(t *testing.T) {
	objs, views := twoVolumes()
	golden(t, "describe-pvc.golden", run(t, views, []string{"describe", "pvc/web-data"}, objs...))
}

func TestDescribeSeed000PV(t *testing.T) {
	out := run(t, nil, []string{"describe", "pv/pvc-000"}, append(base(), stuckDeletedPV()...)...)
	mustContain(t, out,
		"PersistentVolume pvc-000",
		"Status:        Terminating since 2026-11-22 10:00:00Z",
		"Finalizers:    external-attacher/filevol-csi-io",
		"VolumeAttachment csi-5f2a9c", "Node:          node-1", "State:         attached: true",
		"Node node-1", "Ready, driver registered with kubelet",
		"Pods", "none",
		"Driver's view from node node-1", "unavailable: no driver reachable on node-1",
		"Events", "Warning VolumeFailedDelete", "pv/pvc-000") // no trailing: order matters
	mustContain(t, out, "Problems", "ERROR pv/pvc-000: stuck Terminating for 2h", "cause: VolumeAttachment csi-5f2a9c")
}

func TestDescribeErrors(t *testing.T) {
	objs, _ := twoVolumes()
	for _, arg := range []string{"pvc/nope", "pv/nope", "pod/web-0", "web-data"} {
		env, o := testEnv(objs...)
		if err := Run(t.Context(), env, o, []string{"describe", arg}); err == nil || !strings.Contains(err.Error(), "nope") && !strings.Contains(err.Error(), "pvc/NAME") {
			t.Errorf("describe %s: %v", arg, err)
		}
	}
}

func TestDriverPodChoice(t *testing.T) {
	mk := func(name, component string, containers ...corev1.Container) corev1.Pod {
		p := *pod("kube-system", name, "node-1", "")
		p.Labels = map[string]string{"app.kubernetes.io/component": component}
		p.Spec.Containers = containers
		return p
	}
	ctrl := mk("ctl", "controller", corev1.Container{Name: "filevol", Args: []string{"--mode=controller", "--http-endpoint=127.0.0.1:9811"}})
	nodePod := mk("node", "node",
		corev1.Container{Name: "registrar", Args: []string{"--http-endpoint=127.0.0.1:9809"}},
		corev1.Container{Name: "filevol", Args: []string{"--mode=all", "--http-endpoint", "127.0.0.1:9808"}})
	v := podViewer{pods: []corev1.Pod{ctrl, nodePod}, defaultPort: 9808}
	got, port, err := v.driverPod("node-1")
	if err != nil || got.Name != "node" || port != 9808 {
		t.Errorf("driverPod = %v, %d, %v; want the node pod's filevol port 9808", got, port, err)
	}
	if _, _, err := v.driverPod("node-2"); err == nil || !strings.Contains(err.Error(), "--driver-url") {
		t.Errorf("no pod on node-2: %v", err)
	}
}
