package ceph_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/kubesim"
	"github.com/filevol/filevol/test/proc"
)

// imagePool is a shared image pool on the CephFS, served as a cluster
// serves it: one filevol controller process and a filevol node process per
// node, each on the pool as its own ceph-fuse client mounts it (the
// controller's client is node "ctrl"), and a client "reader" of its own
// that reads what reached the storage, never through a node's client.
type imagePool struct {
	t       *testing.T
	c       *ceph.Cluster
	name    string // the test's directory in the CephFS
	dir     string // scratch: kubelet directories, sockets, logs
	bin     string
	ctrlP   *proc.Proc
	ctrl    csipb.ControllerClient
	storage string // the pool as the reader's client sees it
	nodes   map[string]*imgNode
}

// imgNode is a node: kubelet there (its name, its filevol's client, its
// paths for one volume), the node's view of the pool and its filevol.
type imgNode struct {
	kubesim.Node
	pool, kubelet string
	ip            *imagePool
	p             *proc.Proc
}

const imgPoolName = "ceph-images"

// newImagePool mounts the CephFS for the controller, the reader and each
// node, and starts their filevols on a pool in a directory of the test's
// own. Cleanups, last registered first run: the processes stop, then what
// they left in the kernel (mounts under the scratch directory, loop
// devices on this test's images) goes, then the mounts.
func newImagePool(t *testing.T, nodes ...string) *imagePool {
	t.Helper()
	ip := &imagePool{t: t, c: ceph.Shared(t), nodes: map[string]*imgNode{}}
	ip.c.WaitForRoom(t)
	if !*long {
		// A client's first look at a record another client has just
		// renamed into place waits for the MDS's next tick (every 5 s
		// by default; docs/shared-pools-cephfs.md), and an attach hands
		// records over between clients several times: with a tick a
		// second the short tests take half the time. The long ones keep
		// Ceph's defaults.
		ip.c.Ceph(t, "config", "set", "mds", "mds_tick_interval", "1")
		t.Cleanup(func() { ip.c.Ceph(t, "config", "rm", "mds", "mds_tick_interval") })
	}
	ip.name = strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	mounts := map[string]string{}
	for _, n := range append([]string{"ctrl", "reader"}, nodes...) {
		mounts[n] = filepath.Join(ip.c.MountNode(t, n), ip.name, "pool")
	}
	if err := os.MkdirAll(mounts["ctrl"], 0o750); err != nil {
		t.Fatal(err)
	}
	ip.storage = mounts["reader"]
	ip.dir = testutil.Scratch(t, "ceph-images")
	t.Cleanup(ip.cleanKernel)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range append([]*proc.Proc{ip.ctrlP}, ip.procs()...) {
				if p == nil {
					continue
				}
				t.Logf("%s's log:\n%s", p.Name, p.LogText())
			}
		}
	})
	ip.bin = proc.BuildDriver(t)
	start := time.Now()
	ip.ctrlP = ip.start("ctrl", "controller", mounts["ctrl"], ip.dir)
	ip.ctrl = csipb.NewControllerClient(ip.ctrlP.Conn)
	t.Logf("controller up in %v", time.Since(start).Round(time.Millisecond))
	for _, name := range nodes {
		n := &imgNode{Node: kubesim.Node{Name: name}, ip: ip, pool: mounts[name], kubelet: filepath.Join(ip.dir, name)}
		n.Staging, n.Target = filepath.Join(n.kubelet, "staging"), filepath.Join(n.kubelet, "target")
		if err := os.MkdirAll(n.kubelet, 0o750); err != nil {
			t.Fatal(err)
		}
		n.p = ip.start(name, "node", n.pool, n.kubelet)
		n.Client = csipb.NewNodeClient(n.p.Conn)
		ip.nodes[name] = n
	}
	return ip
}

// start starts a filevol on the shared pool, its check of the CephFS
// client reading the harness's admin sockets.
func (ip *imagePool) start(name, mode, pool, kubelet string) *proc.Proc {
	ip.t.Helper()
	return proc.Start(ip.t, ip.bin, ip.dir, name, "--mode", mode, "--pool-shared", "--pool-name", imgPoolName,
		"--node-id", name, "--kubelet-dir", kubelet, "--pool-dir", pool, "--ceph-admin-socket-dir", ip.c.RunDir())
}

// cleanKernel unmounts everything under the scratch directory and
// detaches the loop devices on this test's images, through any node's
// mount, and no other.
func (ip *imagePool) cleanKernel() {
	if table, err := mount.Read(); err == nil {
		ms := table.Under(ip.dir)
		for i := len(ms) - 1; i >= 0; i-- {
			_ = unix.Unmount(ms[i].MountPoint, unix.MNT_DETACH)
		}
	}
	for _, d := range ip.loops() {
		if err := loop.DetachFile(d.BackingFile); err != nil {
			ip.t.Logf("detach %s (%s): %v", d.Path, d.BackingFile, err)
		}
	}
}

// loops lists the loop devices on this test's images.
func (ip *imagePool) loops() []loop.Device {
	devs, err := loop.List()
	if err != nil {
		ip.t.Fatal(err)
	}
	var out []loop.Device
	for _, d := range devs {
		if strings.HasPrefix(d.BackingFile, filepath.Join(ip.c.Dir(), "mnt")+"/") && strings.Contains(d.BackingFile, "/"+ip.name+"/pool/") {
			out = append(out, d)
		}
	}
	return out
}

var bg = context.Background()

var (
	blockVC = kubesim.BlockCapability()
	xfsVC   = kubesim.FilesystemCapability("xfs")
)

// create makes a volume of size bytes (from src when not nil) and
// returns it.
func (ip *imagePool) create(name string, vc *csipb.VolumeCapability, size int64, src *csipb.VolumeContentSource) *csipb.Volume {
	ip.t.Helper()
	r, err := ip.ctrl.CreateVolume(bg, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{vc},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size}, VolumeContentSource: src})
	if err != nil {
		ip.t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return r.GetVolume()
}

func (ip *imagePool) publish(id, node string, vc *csipb.VolumeCapability) (map[string]string, error) {
	r, err := ip.ctrl.ControllerPublishVolume(bg, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: vc})
	return r.GetPublishContext(), err
}

func (ip *imagePool) unpublish(id, node string) {
	ip.t.Helper()
	if _, err := ip.ctrl.ControllerUnpublishVolume(bg, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node}); err != nil {
		ip.t.Fatalf("ControllerUnpublishVolume %s from %s: %v", id, node, err)
	}
}

// image is the volume's image as the reader's client sees it.
func (ip *imagePool) image(id string) string { return filepath.Join(ip.storage, "volumes", id+".img") }

// attach publishes the volume to node, stages and publishes it there, as
// the attacher and kubelet do for a pod, and returns how long it took.
func (n *imgNode) attach(id string, vc *csipb.VolumeCapability) time.Duration {
	n.ip.t.Helper()
	start := time.Now()
	pc, err := n.ip.publish(id, n.Name, vc)
	if err != nil {
		n.ip.t.Fatalf("ControllerPublishVolume %s to %s: %v", id, n.Name, err)
	}
	n.Use(n.ip.t, id, vc, pc)
	return time.Since(start)
}

// detach unpublishes and unstages the volume on the node and unpublishes
// it from the node, as kubelet and the attacher do when the pod is gone.
func (n *imgNode) detach(id string) {
	n.ip.t.Helper()
	n.Release(n.ip.t, id)
	n.ip.unpublish(id, n.Name)
}

// attachWhenAllowed asks for node's attachment every 200 ms while the
// controller refuses it by fencing, at most limit: the publish_context,
// the refusals, and how long it took. Any other error fails the test.
func (ip *imagePool) attachWhenAllowed(id, node string, limit time.Duration) (map[string]string, int, time.Duration) {
	ip.t.Helper()
	start := time.Now()
	for refusals := 0; ; refusals++ {
		pc, err := ip.publish(id, node, blockVC)
		if err == nil {
			return pc, refusals, time.Since(start)
		}
		if !kubesim.IsFencingRefusal(err) {
			ip.t.Fatalf("ControllerPublishVolume to %s: %v; want success or the fencing refusal", node, err)
		}
		if time.Since(start) > limit {
			ip.t.Fatalf("ControllerPublishVolume to %s still fenced after %v: %v", node, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// procs are the nodes' filevols.
func (ip *imagePool) procs() []*proc.Proc {
	var out []*proc.Proc
	for _, n := range ip.nodes {
		if n.p != nil {
			out = append(out, n.p)
		}
	}
	return out
}
