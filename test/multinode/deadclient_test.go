package multinode

import (
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestDeadClientDevicesDetachedAfterRestart: a node killed with volumes
// staged comes back without a reboot — its FUSE client started again over
// the dead one's lazily unmounted mount, then its filevol. Its loop
// devices are still attached to the dead client's files, which the kernel
// can no longer stat (ENOTCONN): they can be told only by the image name
// sysfs shows ("/pool/volumes/<id>.img") and by what only the node has.
//
//   - x, staged and published on node-a: kubelet's NodeUnpublishVolume and
//     NodeUnstageVolume after the restart detach its device (a mount at
//     node-a's staging path makes it node-a's).
//   - y, staged on node-a, whose staging mount was gone by then (an older
//     build's unstage unmounted it and could not detach): node-a's sweep
//     detaches it (nothing uses it; node-a alone records it in use).
//   - z, staged on node-b, killed the same way, its staging mount gone
//     too: a device of the same kind under the same kind of name, which
//     neither node-a's sweep nor its unstage touches.
func TestDeadClientDevicesDetachedAfterRestart(t *testing.T) {
	c := newCluster(t, "gluster", true, "node-a", "node-b")
	a, b := c.nodes["node-a"], c.nodes["node-b"]
	stage := func(n *node, name string, publish bool) (string, loop.Device) {
		t.Helper()
		id := c.create(name, ext4Cap)
		pc := c.mustPublish(id, n.Name, ext4Cap)
		staging := filepath.Join(n.kubelet, "staging-"+name)
		if _, err := n.Client.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
			VolumeCapability: ext4Cap, PublishContext: pc}); err != nil {
			t.Fatalf("NodeStageVolume %s on %s: %v", name, n.Name, err)
		}
		if publish {
			if _, err := n.Client.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
				TargetPath: filepath.Join(n.kubelet, "target-"+name), VolumeCapability: ext4Cap, PublishContext: pc}); err != nil {
				t.Fatalf("NodePublishVolume %s on %s: %v", name, n.Name, err)
			}
		}
		devs, err := loop.Find(filepath.Join(n.pool, "volumes", id+".img"))
		if err != nil || len(devs) != 1 {
			t.Fatalf("%s's devices on %s: %v %v", n.Name, name, devs, err)
		}
		return id, devs[0]
	}
	x, dx := stage(a, "dead-x", true)
	y, dy := stage(a, "dead-y", false)
	z, dz := stage(b, "dead-z", false)
	for _, n := range []*node{a, b} {
		n.kill()
		c.g.KillClient(t, n.Name)
	}
	// The staging mounts of y and z gone, as an older build's unstage left them.
	for _, p := range []string{filepath.Join(a.kubelet, "staging-dead-y"), filepath.Join(b.kubelet, "staging-dead-z")} {
		if err := unix.Unmount(p, 0); err != nil {
			t.Fatalf("unmount %s: %v", p, err)
		}
	}
	for _, n := range []*node{a, b} {
		c.g.RestartClient(t, n.Name, clientArgs...)
	}
	// What the kernel shows of them now. What is left at the end is the
	// test's to detach: cleanKernel knows devices by their path under the
	// test's directories, which a dead client's file no longer has.
	devs := map[string]loop.Device{x: dx, y: dy, z: dz}
	t.Cleanup(func() {
		c.unmountUnder(c.dir)
		for id, d := range devs {
			if d := current(t, d, id); d.Path != "" {
				if err := loop.DetachUnreachable(d); err != nil {
					t.Logf("detach the dead device %s: %v", d.Path, err)
				}
			}
		}
	})
	left := map[string]loop.Device{}
	for id, d := range devs {
		d = current(t, d, id)
		if !loop.Unreachable(d) {
			t.Fatalf("%s (%s) is not unreachable after its client died", d.Path, d.BackingFile)
		}
		left[id] = d
	}
	t.Logf("dead devices: x %s, y %s, z %s (%s)", left[x].Path, left[y].Path, left[z].Path, left[z].BackingFile)

	a.restart()
	sweepDone(t, a)
	if !a.p.LogHas("detached a loop device left on a dead client's file", y) || current(t, dy, y).Path != "" {
		t.Fatalf("node-a's sweep did not detach its unused dead device %s of y:\n%s", dy.Path, a.p.LogText())
	}
	if current(t, dz, z).Path == "" {
		t.Fatalf("node-a's sweep detached node-b's dead device %s", dz.Path)
	}
	if current(t, dx, x).Path == "" {
		t.Fatalf("node-a's sweep detached %s, still staged", dx.Path)
	}
	if _, err := a.Client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: x,
		TargetPath: filepath.Join(a.kubelet, "target-dead-x")}); err != nil {
		t.Fatalf("NodeUnpublishVolume x: %v", err)
	}
	if _, err := a.Client.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: x,
		StagingTargetPath: filepath.Join(a.kubelet, "staging-dead-x")}); err != nil {
		t.Fatalf("NodeUnstageVolume x: %v", err)
	}
	if current(t, dx, x).Path != "" {
		t.Fatalf("NodeUnstageVolume x left its dead device %s attached", dx.Path)
	}
	if current(t, dz, z).Path == "" {
		t.Fatalf("node-a detached node-b's dead device %s", dz.Path)
	}
}

// current returns d as the kernel shows it now if it is still attached to
// volume id's image (by name: a dead client's file has no other), or the
// zero Device.
func current(t *testing.T, d loop.Device, id string) loop.Device {
	t.Helper()
	devs, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range devs {
		if x.Path == d.Path && strings.HasSuffix(x.BackingFile, "/volumes/"+id+".img") {
			return x
		}
	}
	return loop.Device{}
}
