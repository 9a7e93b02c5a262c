package split

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/proc"
)

// A directory pool that every node mounts (--pool-shared with
// --dir-pool-dir): one controller process and two node processes, each
// with its own node ID and kubelet directory, on one btrfs. A
// MULTI_NODE_MULTI_WRITER volume is attached to both nodes, published on
// both, and each sees the other's writes, within one size; a
// MULTI_NODE_READER_ONLY one is read-only on both; a SINGLE_NODE one is
// refused to the second node.
func TestSharedDirectoryPoolServesRWX(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "split-dir-shared")
	btrfs := dirpooltest.Btrfs(t, testutil.Scratch(t, "split-dir-shared-btrfs"), 1<<30)
	bin := proc.BuildDriver(t)
	shared := []string{"--pool-shared", "--pool-name", "shared-test", "--dir-pool-dir", btrfs}
	ctrlProc := proc.Start(t, bin, dir, "controller", append([]string{"--mode", "controller", "--node-id", "controller-host", "--kubelet-dir", dir}, shared...)...)
	ctrl := csipb.NewControllerClient(ctrlProc.Conn)
	nodes := map[string]*sharedNode{}
	for _, name := range []string{"node-a", "node-b"} {
		kubelet := filepath.Join(dir, name)
		if err := os.MkdirAll(kubelet, 0o750); err != nil {
			t.Fatal(err)
		}
		p := proc.Start(t, bin, dir, name, append([]string{"--mode", "node", "--node-id", name, "--kubelet-dir", kubelet}, shared...)...)
		nodes[name] = &sharedNode{name: name, p: p, node: csipb.NewNodeClient(p.Conn),
			staging: filepath.Join(kubelet, "staging"), target: filepath.Join(kubelet, "target")}
	}
	a, b := nodes["node-a"], nodes["node-b"]
	ctx := context.Background()
	params := map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory}
	dirCap := func(m csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
		return &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: m},
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}}
	}
	create := func(name string, c *csipb.VolumeCapability) string {
		t.Helper()
		r, err := ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, Parameters: params,
			VolumeCapabilities: []*csipb.VolumeCapability{c}, CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		if seg := r.GetVolume().GetAccessibleTopology()[0].GetSegments(); seg[csi.PoolTopologyKey] != "shared-test" {
			t.Fatalf("topology %v, want the shared pool's", seg)
		}
		return r.GetVolume().GetVolumeId()
	}
	attach := func(id string, n *sharedNode, c *csipb.VolumeCapability, ro bool) {
		t.Helper()
		pub, err := ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: n.name, VolumeCapability: c, Readonly: ro})
		if err != nil {
			t.Fatalf("attach %s to %s: %v", id, n.name, err)
		}
		if _, err := n.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: n.staging,
			VolumeCapability: c, PublishContext: pub.GetPublishContext()}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: n.staging,
			TargetPath: n.target, VolumeCapability: c, PublishContext: pub.GetPublishContext(), Readonly: ro}); err != nil {
			t.Fatal(err)
		}
	}
	detach := func(id string, n *sharedNode) {
		t.Helper()
		if err := n.unpublishAndUnstage(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: n.name}); err != nil {
			t.Fatal(err)
		}
	}

	rwx := dirCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	id := create("rwx", rwx)
	attach(id, a, rwx, false)
	attach(id, b, rwx, false)
	for _, w := range []struct{ from, to *sharedNode }{{a, b}, {b, a}} {
		name := "written-on-" + w.from.name
		if err := os.WriteFile(filepath.Join(w.from.target, name), []byte(w.from.name), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(w.to.target, name)); err != nil || string(got) != w.from.name {
			t.Errorf("%s reads %q, %v of what %s wrote", w.to.name, got, err, w.from.name)
		}
	}
	// One size for both: what a wrote counts against b's writes.
	if err := fillFile(filepath.Join(a.target, "a-half"), 10<<20); err != nil {
		t.Fatal(err)
	}
	if err := fillFile(filepath.Join(b.target, "b-half"), 10<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("b wrote 10 MiB more into a 16 MiB claim a filled 10 MiB of: %v, want EDQUOT", err)
	}
	_, err := ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume while staged on two nodes", err, codes.FailedPrecondition, "node-a", "node-b")
	detach(id, a)
	detach(id, b)
	if _, err := ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}

	rox := dirCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
	rid := create("rox", rox)
	attach(rid, a, rox, true)
	attach(rid, b, rox, true)
	for _, n := range []*sharedNode{a, b} {
		if err := os.WriteFile(filepath.Join(n.target, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Errorf("write on %s to a MULTI_NODE_READER_ONLY volume: %v, want EROFS", n.name, err)
		}
		detach(rid, n)
	}

	rwo := dirCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	oid := create("rwo", rwo)
	attach(oid, a, rwo, false)
	_, err = ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: oid, NodeId: "node-b", VolumeCapability: rwo})
	wantCode(t, "ControllerPublishVolume of a SINGLE_NODE volume to a second node", err, codes.FailedPrecondition, "node-a")
	detach(oid, a)
}

func fillFile(path string, n int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i) | 1
	}
	for done := 0; done < n; done += len(buf) {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Sync()
}
