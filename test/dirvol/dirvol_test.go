// Package dirvol runs directory volumes (provisioningMode: directory)
// through the real services as kubelet and the sidecars would: a
// directory pool on a btrfs of its own, bind mounts in the kernel.
package dirvol

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

const mib = 1 << 20

func dirCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
	}
}

// A claim's whole life: created with its owner and mode, published with
// nosuid,nodev, filled to its size (EDQUOT), measured, grown online while
// published (no node step), published read-only elsewhere, unpublished
// and deleted, leaving nothing.
func TestDirectoryVolumeLifecycle(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "dirvol")
	btrfs := dirpooltest.Btrfs(t, testutil.Scratch(t, "dirvol-btrfs"), 1<<30)
	d := driver.StartWithDirPool(t, dir, btrfs)
	ctx := context.Background()
	rw := dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)
	params := map[string]string{
		dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory,
		dirpool.ParamSubPathPattern:   "${.PVC.namespace}/${.PVC.name}", dirpool.ParamBasePath: "claims",
		dirpool.ParamPVCNamespace: "team-a", dirpool.ParamPVCName: "data",
		dirpool.ParamUID: "1001", dirpool.ParamGID: "2002", dirpool.ParamDirectoryPerms: "2770",
	}
	resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-1", Parameters: params,
		VolumeCapabilities: []*csipb.VolumeCapability{rw}, CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 * mib}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	if !strings.HasPrefix(id, "fv1-dir-") || resp.GetVolume().GetCapacityBytes() != 32*mib {
		t.Fatalf("CreateVolume made %v", resp.GetVolume())
	}
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "pods", "p1", "vol")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	// Retried: success, one mount.
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, target)
	if len(m) != 1 || !slices.Contains(m[0].Options, "nosuid") || !slices.Contains(m[0].Options, "nodev") || m[0].ReadOnly() {
		t.Fatalf("target mounts: %+v", m)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(target, &st); err != nil || st.Uid != 1001 || st.Gid != 2002 || st.Mode&0o7777 != 0o2770 {
		t.Errorf("the pod sees %d:%d %o (%v), want 1001:2002 2770", st.Uid, st.Gid, st.Mode&0o7777, err)
	}
	if _, err := os.Stat(filepath.Join(btrfs, "claims", "team-a")); err != nil {
		t.Errorf("subPathPattern not honoured: %v", err)
	}

	if n, err := fill(filepath.Join(target, "a"), 64*mib); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("wrote %d bytes into a 32 MiB claim: %v, want EDQUOT", n, err)
	}
	if err := d.DirPool.SyncFS(); err != nil {
		t.Fatal(err)
	}
	stats, err := d.Node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	u := stats.GetUsage()[0]
	if u.GetTotal() != 32*mib || u.GetUsed() < 16*mib || u.GetAvailable() != u.GetTotal()-u.GetUsed() {
		t.Errorf("stats %+v, want the qgroup's usage of 32 MiB", u)
	}

	exp, err := d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 96 * mib}, VolumeCapability: rw})
	if err != nil || exp.GetCapacityBytes() != 96*mib || exp.GetNodeExpansionRequired() {
		t.Fatalf("ControllerExpandVolume: %v, %v; want 96 MiB, no node step", exp, err)
	}
	if n, err := fill(filepath.Join(target, "b"), 48*mib); err != nil {
		t.Errorf("after growing online, wrote %d of 48 MiB: %v", n, err)
	}

	ro := filepath.Join(dir, "pods", "p2", "vol")
	if err := os.MkdirAll(filepath.Dir(ro), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		TargetPath: ro, VolumeCapability: rw, Readonly: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through the read-only target: %v, want EROFS", err)
	}
	_, err = d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume while staged", err, codes.FailedPrecondition)

	for _, tp := range []string{target, ro} {
		if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: tp}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(tp); !os.IsNotExist(err) {
			t.Errorf("target %s left: %v", tp, err)
		}
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	if err := d.DirPool.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(btrfs, "claims", "team-a")); len(ents) != 0 {
		t.Errorf("left in the pool: %v", ents)
	}
}

// Access modes and parameters a directory volume cannot honour are
// refused, naming why; none is ignored.
func TestDirectoryVolumeRefusals(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "dirvol")
	btrfs := dirpooltest.Btrfs(t, testutil.Scratch(t, "dirvol-btrfs"), 1<<30)
	d := driver.StartWithDirPool(t, dir, btrfs)
	ctx := context.Background()
	base := map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory}
	for _, tc := range []struct {
		name   string
		params map[string]string
		cap    *csipb.VolumeCapability
		code   codes.Code
		says   string
	}{
		{"multi node", base, dirCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), codes.InvalidArgument, "node-local"},
		{"block", base, driver.BlockCap(), codes.InvalidArgument, "block"},
		{"fsType", base, driver.MountCap("xfs"), codes.InvalidArgument, "filesystem type"},
		{"unknown parameter", with(base, "fsType", "ext4"), dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.InvalidArgument, "unknown parameter"},
		{"escape", with(base, dirpool.ParamBasePath, "../../etc"), dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.InvalidArgument, ".."},
		{"bad mode", with(base, dirpool.ParamProvisioningMode, "efs-ap"), dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.InvalidArgument, "directory"},
		{"gid range used up", with(base, dirpool.ParamGIDRangeStart, "900", dirpool.ParamGIDRangeEnd, "900"), dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.ResourceExhausted, "900..900"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.code == codes.ResourceExhausted {
				if _, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "first-" + strings.ReplaceAll(tc.name, " ", "-"), Parameters: tc.params,
					VolumeCapabilities: []*csipb.VolumeCapability{tc.cap}, CapacityRange: &csipb.CapacityRange{RequiredBytes: mib}}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: strings.ReplaceAll(tc.name, " ", "-"), Parameters: tc.params,
				VolumeCapabilities: []*csipb.VolumeCapability{tc.cap}, CapacityRange: &csipb.CapacityRange{RequiredBytes: mib}})
			wantCode(t, tc.name, err, tc.code)
			if err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%s: %v does not say %q", tc.name, err, tc.says)
			}
		})
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: %v (code %s), want %s", what, err, got, want)
	}
}

func mountAt(t *testing.T, path string) []mount.Info {
	t.Helper()
	table, err := mount.Read()
	if err != nil {
		t.Fatal(err)
	}
	return table.At(path)
}

func fill(path string, n int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, mib)
	for i := range buf {
		buf[i] = byte(i) | 1
	}
	var done int64
	for done < n {
		w, err := f.Write(buf)
		done += int64(w)
		if err != nil {
			return done, err
		}
	}
	return done, f.Sync()
}
