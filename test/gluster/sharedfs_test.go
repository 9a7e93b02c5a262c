package gluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/nodeview/api"
	"github.com/filevol/filevol/internal/sharedfs"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/gluster"
	"github.com/filevol/filevol/test/proc"
)

// TestSharedPoolFilesystemChecked: filevol checks, at start, that the
// GlusterFS client holding a shared pool runs as docs/shared-pools-
// glusterfs.md requires (internal/sharedfs), on one volume and two
// clients:
//
//   - node-a mounted as documented (CoherentClientArgs), the volume with
//     SharedPoolSettings: every setting read as required, filevol serves;
//   - node-b mounted with GlusterFS's default timeouts: refused, naming
//     entry-timeout and attribute-timeout and the remount;
//   - client.strict-locks reset on the running volume: node-a's client
//     takes it in place and still shows on (the check cannot see it);
//     once remounted, node-a is refused, naming strict-locks and its fix;
//   - the same with --shared-pool-unsafe-allow=strict-locks: serves, and
//     warns at start, in the node view and on an attach;
//   - stat-prefetch and quick-read back on: both found (the md-cache and
//     quick-read translators in the client's graph).
func TestSharedPoolFilesystemChecked(t *testing.T) {
	g := gluster.Start(t, gluster.Options{Set: gluster.SharedPoolSettings})
	a := g.MountNode(t, "node-a", gluster.CoherentClientArgs...)
	b := g.MountNode(t, "node-b")
	bin := proc.BuildDriver(t)
	dir := testutil.Scratch(t, "sharedfs")
	for _, m := range []string{a, b} {
		if err := os.MkdirAll(filepath.Join(m, "pool"), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	args := func(mnt string, more ...string) []string {
		return append([]string{"--mode", "all", "--pool-shared", "--pool-name", "gl", "--node-id", filepath.Base(mnt),
			"--kubelet-dir", dir, "--pool-dir", filepath.Join(mnt, "pool")}, more...)
	}

	// As documented.
	start := time.Now()
	r, err := sharedfs.Check(filepath.Join(a, "pool"))
	took := time.Since(start)
	if err != nil || r.Kind != sharedfs.KindGlusterFS || r.Volume != g.Volume() {
		t.Fatalf("node-a as documented: %s: %v", r, err)
	}
	for _, f := range r.Found {
		if !f.OK {
			t.Errorf("node-a as documented: %+v", f)
		}
	}
	t.Logf("node-a, as documented: %s (checked in %v)", r, took.Round(time.Microsecond))
	p := proc.Start(t, bin, dir, "documented", args(a)...)
	if !p.LogHas("shared pool filesystem checked", "kind=\"glusterfs\"") {
		t.Errorf("no check logged:\n%s", p.LogText())
	}
	if p.LogHas("UNSAFE") {
		t.Errorf("a warning as documented:\n%s", p.LogText())
	}
	p.Stop(t)

	// Default timeouts.
	out := refused(t, bin, dir, args(b)...)
	for _, want := range []string{
		"is on GlusterFS volume fvgl (" + g.Addr() + ":fvgl mounted at " + b + ")",
		"entry-timeout: 1 s (" + b + "/.meta/root/private), want 0",
		"attribute-timeout: 1 s (" + b + "/.meta/root/private), want 0",
		"mount -t glusterfs -o entry-timeout=0,attribute-timeout=0 " + g.Addr() + ":fvgl " + b,
		"--shared-pool-unsafe-allow=entry-timeout",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("node-b's refusal lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "strict-locks:") || strings.Contains(out, "quick-read:") {
		t.Errorf("node-b's refusal names a setting the volume has:\n%s", out)
	}

	// strict-locks reset on the running volume: the clients take it in
	// place, and .meta keeps the value their graph was built with (what
	// the check reads): it is seen once node-a's client is remounted.
	g.Gluster(t, "volume", "reset", g.Volume(), "client.strict-locks")
	time.Sleep(2 * time.Second)
	if r, err := sharedfs.Check(a); err != nil || r.Found[0].Value != "on" {
		t.Errorf("strict-locks reset in place: node-a reads %s (%v); measured before: still on (the graph's value), the live one is not shown. If GlusterFS changed, update internal/sharedfs/glusterfs.go and the docs", r, err)
	}
	g.KillClient(t, "node-a")
	g.RestartClient(t, "node-a", gluster.CoherentClientArgs...)
	waitFound(t, a, sharedfs.SettingStrictLocks, "off")
	out = refused(t, bin, dir, args(a)...)
	for _, want := range []string{
		"strict-locks: off in fvgl-client-0 (" + a + "/.meta/graphs/active/fvgl-client-0/options/strict-locks), want on",
		"fix: gluster volume set fvgl client.strict-locks on, then remount the volume on every node",
		"--shared-pool-unsafe-allow=strict-locks",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("node-a's refusal without strict-locks lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "entry-timeout:") {
		t.Errorf("node-a's refusal names a setting it has:\n%s", out)
	}

	// The override: serves, and warns at start, in the view, on attach.
	port := freePort(t)
	p = proc.Start(t, bin, dir, "unsafe", args(a, "--shared-pool-unsafe-allow=strict-locks", "--http-endpoint", port)...)
	if !p.LogHas("UNSAFE, allowed by --shared-pool-unsafe-allow=strict-locks: strict-locks: off in fvgl-client-0") {
		t.Errorf("no warning at start:\n%s", p.LogText())
	}
	view := nodeView(t, port)
	t.Logf("node view warnings: %q", view.Warnings)
	if len(view.Warnings) != 1 || !strings.Contains(view.Warnings[0], "UNSAFE") {
		t.Errorf("node view warnings: %q", view.Warnings)
	}
	ctl := csipb.NewControllerClient(p.Conn)
	ctx := t.Context()
	mountCap := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
	}
	v, err := ctl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "unsafe", VolumeCapabilities: []*csipb.VolumeCapability{mountCap},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := v.GetVolume().GetVolumeId()
	if _, err := ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	if !p.LogHas("attached to node node-a on a shared pool whose filesystem lacks", "strict-locks on "+filepath.Join(a, "pool")) {
		t.Errorf("no warning on attach:\n%s", p.LogText())
	}
	if _, err := ctl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}); err != nil {
		t.Error(err)
	}
	if _, err := ctl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Error(err)
	}
	p.Stop(t)

	// md-cache and quick-read on.
	g.SetOption(t, "performance.stat-prefetch", "on")
	g.SetOption(t, "performance.quick-read", "on")
	waitFound(t, a, sharedfs.SettingQuickRead, "on")
	r, err = sharedfs.Check(filepath.Join(a, "pool"))
	var unmet []string
	for _, u := range sharedfs.Unmets(err) {
		unmet = append(unmet, u.Setting)
	}
	if !slices.Equal(unmet, []string{sharedfs.SettingStrictLocks, sharedfs.SettingStatPrefetch, sharedfs.SettingQuickRead}) {
		t.Errorf("GlusterFS's defaults, node-a: unmet %v:\n%v", unmet, err)
	}
	t.Logf("GlusterFS's defaults, node-a: %s", r)
}

// refused runs filevol, which must exit at once with an error; its output.
func refused(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--endpoint", "unix://" + filepath.Join(dir, "refused.sock")}, args...)...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("filevol %v: %v, want exit status 1:\n%s", args, err, out)
	}
	t.Logf("filevol refused in %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	return string(out)
}

// waitFound waits (10 s at most) until the client at mnt shows setting
// with value: a `gluster volume set` reaches the clients as a new graph.
func waitFound(t *testing.T, mnt, setting, value string) {
	t.Helper()
	start := time.Now()
	for {
		r, _ := sharedfs.Check(mnt)
		for _, f := range r.Found {
			if f.Setting == setting && f.Value == value {
				t.Logf("%s: %s=%s after %v", mnt, setting, value, time.Since(start).Round(time.Millisecond))
				return
			}
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: %s is not %s after 10 s: %s", mnt, setting, value, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func nodeView(t *testing.T, addr string) api.Report {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s%s", addr, api.Path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var r api.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return r
}
