package nodeview

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/nodeview/api"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

const testPodUID = "0b7e2c1a-5d4f-4c3b-9a8e-1f2d3c4b5a69"

// setup makes a pool with three volumes: one published filesystem, one
// staged block volume, one idle; the kernel shows their devices and mounts.
func setup(t *testing.T) (*Builder, map[string]volume.Volume) {
	t.Helper()
	dir := t.TempDir()
	p, err := pool.Open(filepath.Join(dir, "pool"), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	vols := map[string]volume.Volume{}
	for _, name := range []string{"fs", "block", "idle"} {
		v, err := p.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: 64 << 20, FSType: "ext4",
			Parameters: map[string]string{ParamPVName: "pv-" + name, ParamPVCName: "data-" + name, ParamPVCNamespace: "ns1"}})
		if err != nil {
			t.Fatal(err)
		}
		if name != "idle" { // staged: its image is made and committed (pool/pending.go)
			if v, err = p.CommitImage(v); err != nil {
				t.Fatal(err)
			}
		}
		vols[name] = v
	}
	real := func(id string) string {
		r, err := filepath.EvalSymlinks(p.ImagePath(id))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	staging := "/var/lib/kubelet/plugins/kubernetes.io/csi/filevol.csi.io/abc/globalmount"
	target := "/var/lib/kubelet/pods/" + testPodUID + "/volumes/kubernetes.io~csi/pv-fs/mount"
	blockStaging := "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-block/device"
	k := fake.New()
	for _, d := range []loop.Device{
		{Path: "/dev/loop3", Number: 3, BackingFile: real(vols["fs"].ID), SizeBytes: 64 << 20, Major: 7, Minor: 3, DirectIO: true},
		{Path: "/dev/loop4", Number: 4, BackingFile: real(vols["block"].ID), SizeBytes: 64 << 20, Major: 7, Minor: 4},
		{Path: "/dev/loop9", Number: 9, BackingFile: "/elsewhere/disk.img", Major: 7, Minor: 9},
	} {
		k.AddDevice(d)
	}
	for _, m := range []mount.Info{
		{ID: 100, Major: 7, Minor: 3, Root: "/", MountPoint: staging, FSType: "ext4", Source: "/dev/loop3"},
		{ID: 101, Major: 7, Minor: 3, Root: "/", MountPoint: target, FSType: "ext4", Source: "/dev/loop3"},
		{ID: 102, Major: 0, Minor: 5, Root: "/loop4", MountPoint: blockStaging, FSType: "devtmpfs", Source: "udev"},
		{ID: 103, Major: 7, Minor: 9, Root: "/", MountPoint: "/mnt/other", FSType: "xfs", Source: "/dev/loop9"},
	} {
		k.AddMount(m)
	}
	k.SetStats(real(vols["fs"].ID), fs.Stats{TotalBytes: 60 << 20, UsedBytes: 10 << 20, AvailableBytes: 50 << 20})
	b := &Builder{Node: "n1", Driver: "filevol.csi.io", Version: "test", Pool: p, Kernel: k.Host(),
		Health: func(_ context.Context, id, st, tg string) ([]api.Condition, error) {
			if id == vols["fs"].ID && st == staging && tg == target {
				return []api.Condition{{Status: "DEGRADED", Reason: "FilesystemReadOnly", Message: "remounted ro"}}, nil
			}
			return nil, nil
		}}
	return b, vols
}

func TestBuild(t *testing.T) {
	b, vols := setup(t)
	r := b.Build(context.Background(), true)
	if len(r.Errors) != 0 {
		t.Fatalf("errors: %v", r.Errors)
	}
	if r.LoopDevices != 2 {
		t.Errorf("LoopDevices = %d, want 2 (the foreign /dev/loop9 is not the pool's)", r.LoopDevices)
	}
	if len(r.Volumes) != 3 {
		t.Fatalf("%d volumes, want 3", len(r.Volumes))
	}
	byID := map[string]api.Volume{}
	for _, v := range r.Volumes {
		byID[v.Record.ID] = v
	}
	fsv := byID[vols["fs"].ID]
	if fsv.State != api.StatePublished || len(fsv.Staging) != 1 || len(fsv.Targets) != 1 || fsv.Targets[0].PodUID != testPodUID {
		t.Errorf("fs volume: state %s staging %+v targets %+v", fsv.State, fsv.Staging, fsv.Targets)
	}
	if fsv.Usage == nil || fsv.Usage.UsedBytes != 10<<20 {
		t.Errorf("fs volume usage = %+v, want 10 MiB used", fsv.Usage)
	}
	if len(fsv.Health) != 1 || fsv.Health[0].Reason != "FilesystemReadOnly" {
		t.Errorf("fs volume health = %+v", fsv.Health)
	}
	if fsv.PV != "pv-fs" || fsv.PVCNamespace != "ns1" || fsv.PVCName != "data-fs" {
		t.Errorf("fs volume claim = %q %q/%q", fsv.PV, fsv.PVCNamespace, fsv.PVCName)
	}
	if !fsv.Image.Exists || fsv.Image.SizeBytes != 64<<20 {
		t.Errorf("fs image = %+v", fsv.Image)
	}
	bv := byID[vols["block"].ID]
	if bv.State != api.StateStaged || len(bv.Staging) != 1 || bv.Usage != nil {
		t.Errorf("block volume: state %s staging %+v usage %+v", bv.State, bv.Staging, bv.Usage)
	}
	if iv := byID[vols["idle"].ID]; iv.State != api.StateIdle || len(iv.LoopDevices) != 0 {
		t.Errorf("idle volume: %+v", iv)
	}
	// Never staged: its image is made at first use, and says so.
	if img := byID[vols["idle"].ID].Image; img.Exists || !img.Pending {
		t.Errorf("idle volume not used yet: image %+v, want pending and not there", img)
	}
	if img := byID[vols["fs"].ID].Image; !img.Exists || img.Pending {
		t.Errorf("staged volume: image %+v, want there and not pending", img)
	}
}

func TestBuildReportsMissingImageAndQuarantine(t *testing.T) {
	b, vols := setup(t)
	if _, err := b.Pool.(*pool.Pool).CommitImage(vols["idle"]); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(b.Pool.ImagePath(vols["idle"].ID)); err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(b.Pool.Dir(), "quarantine")
	if err := os.WriteFile(filepath.Join(q, "fv-x-20260101T000000.000000000Z.img"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.Build(context.Background(), false)
	if len(r.Quarantine) != 1 {
		t.Errorf("quarantine = %v", r.Quarantine)
	}
	for _, v := range r.Volumes {
		if v.Record.ID == vols["idle"].ID && (v.Image.Exists || v.Image.Pending) {
			t.Errorf("deleted image of a used volume reported as %+v", v.Image)
		}
		if v.Health != nil {
			t.Errorf("health computed although not asked: %+v", v.Health)
		}
	}
}

func TestHandler(t *testing.T) {
	b, vols := setup(t)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + api.Path + "?pv=pv-block")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r api.Report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Volumes) != 1 || r.Volumes[0].Record.ID != vols["block"].ID || r.Node != "n1" {
		t.Errorf("?pv=pv-block gave %+v", r)
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+api.Path, nil)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp2.StatusCode)
	}
}

// TestBuildLeavesAnotherNodesDevices: nodes that share a kernel (the
// multi-node e2e cluster: each node's pool at the same path in its own mount
// namespace) see each other's loop devices, shown under this pool's path.
// Only the backing file's identity makes a device this pool's: another
// node's device on the path of our idle volume neither counts nor makes
// that volume attached.
func TestBuildLeavesAnotherNodesDevices(t *testing.T) {
	b, vols := setup(t)
	k := b.Kernel.Loops.(*fake.Host)
	vdir, err := filepath.EvalSymlinks(b.Pool.VolumesDir())
	if err != nil {
		t.Fatal(err)
	}
	k.AddForeignDevice(loop.Device{Path: "/dev/loop20", Number: 20, Major: 7, Minor: 20, SizeBytes: 64 << 20,
		BackingFile: filepath.Join(vdir, filepath.Base(b.Pool.ImagePath(vols["idle"].ID)))})
	k.AddForeignDevice(loop.Device{Path: "/dev/loop21", Number: 21, Major: 7, Minor: 21, SizeBytes: 64 << 20,
		BackingFile: filepath.Join(vdir, "fv-0123456789abcdef0123456789abcdef.img")})
	r := b.Build(context.Background(), false)
	if len(r.Errors) != 0 {
		t.Fatalf("errors: %v", r.Errors)
	}
	if r.LoopDevices != 2 {
		t.Errorf("LoopDevices = %d, want 2: another node's devices are not this pool's", r.LoopDevices)
	}
	for _, v := range r.Volumes {
		if v.Record.ID == vols["idle"].ID && (v.State != api.StateIdle || len(v.LoopDevices) != 0) {
			t.Errorf("idle volume: state %s, devices %+v; want idle, none (the device is another node's file)", v.State, v.LoopDevices)
		}
	}
}

type dirList []volume.Volume

func (d dirList) List() []volume.Volume { return d }

// Directory volumes appear in the view only with an abnormal condition
// (a pod's quota escape the pool repaired), with their claim, so that the
// monitor's events and doctor carry it.
func TestBuildListsAbnormalDirectoryVolumes(t *testing.T) {
	b, _ := setup(t)
	b.DirPool = dirList{
		{ID: "fv1-dir-0000000a-01", Name: "quiet"},
		{ID: "fv1-dir-0000000a-02", Name: "escaped", Parameters: map[string]string{ParamPVName: "pv-esc"}},
	}
	b.DirHealth = func(_ context.Context, id, _, _ string) ([]api.Condition, error) {
		if id == "fv1-dir-0000000a-02" {
			return []api.Condition{{Status: "DEGRADED", Reason: "QuotaEscapeRepaired", Message: "esc"}}, nil
		}
		return nil, nil
	}
	r := b.Build(context.Background(), true)
	if len(r.DirVolumes) != 1 || r.DirVolumes[0].Record.ID != "fv1-dir-0000000a-02" || r.DirVolumes[0].PV != "pv-esc" ||
		len(r.DirVolumes[0].Health) != 1 || r.DirVolumes[0].Health[0].Reason != "QuotaEscapeRepaired" {
		t.Errorf("DirVolumes = %+v, want the escaped one only, with its PV and condition", r.DirVolumes)
	}
	if len(r.Volumes) != 3 {
		t.Errorf("%d image volumes, want the 3 of the pool: directory volumes stay apart", len(r.Volumes))
	}
	if r := b.Build(context.Background(), false); len(r.DirVolumes) != 0 {
		t.Errorf("without health the view asked it anyway: %+v", r.DirVolumes)
	}
}
