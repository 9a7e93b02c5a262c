package ceph_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/kubesim"
	"github.com/filevol/filevol/test/marker"
	"github.com/filevol/filevol/test/proc"
)

// TestImagePoolAttachAndFence: a shared image pool on the CephFS, its
// controller and two nodes each on a ceph-fuse client of their own.
//
//   - node-a attaches and stages a block volume (its loop device holds the
//     image's OFD lock, which the MDS enforces between clients); node-b's
//     attach is refused while it does; node-a detaches and node-b
//     attaches with node-a's data.
//   - node-b's client is killed (a dead node), evicted (what an operator,
//     or one day the controller, does) and the volume force-detached:
//     node-a is attached within seconds with node-b's data, and nothing
//     node-b's device writes afterwards reaches the image, as read by a
//     client of its own. Without the eviction: TestImagePoolFenceLong.
func TestImagePoolAttachAndFence(t *testing.T) {
	ip := newImagePool(t, "node-a", "node-b")
	a, b := ip.nodes["node-a"], ip.nodes["node-b"]
	start := time.Now()
	id := ip.create("fenced", blockVC, 1<<30, nil).GetVolumeId()
	t.Logf("CreateVolume of 1 GiB (thin) took %v", time.Since(start).Round(time.Millisecond))

	took := a.attach(id, blockVC)
	t.Logf("node-a: ControllerPublish + NodeStage + NodePublish of a block volume took %v", took.Round(time.Millisecond))
	if w := marker.Write(a.Target, marker.Block(0), "before"); !w.OK() || !marker.Holds(t, ip.image(id), marker.Block(0), "before") {
		t.Fatalf("node-a's first write: %v, or not in the storage", w)
	}
	if _, err := ip.publish(id, "node-b", blockVC); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "node-a") {
		t.Fatalf("ControllerPublishVolume to node-b while node-a is attached: %v; want FAILED_PRECONDITION naming node-a", err)
	}
	// Force-detached while node-a's device is still there: the image's
	// lock, held by the device through node-a's client, refuses node-b.
	ip.unpublish(id, "node-a")
	for i := range 3 {
		if _, err := ip.publish(id, "node-b", blockVC); !kubesim.IsFencingRefusal(err) {
			t.Fatalf("ControllerPublishVolume to node-b while node-a's device holds the image (try %d): %v; want the fencing refusal", i, err)
		}
	}
	a.Release(t, id)
	pc, refusals, _ := ip.attachWhenAllowed(id, "node-b", 10*time.Second)
	if refusals != 0 {
		t.Errorf("node-b refused %d times after node-a detached", refusals)
	}
	b.Use(t, id, blockVC, pc)
	if !marker.Holds(t, b.Target, marker.Block(0), "before") {
		t.Fatal("node-b does not read node-a's data")
	}
	if w := marker.Write(b.Target, marker.Block(1), "b-first"); !w.OK() || !marker.Holds(t, ip.image(id), marker.Block(1), "b-first") {
		t.Fatalf("node-b's write: %v, or not in the storage", w)
	}

	// node-b dies; before the force-detach its client is evicted, as an
	// operator (or one day the controller) does: without it the MDS keeps
	// the dead client's caps and locks, and the controller's calls on
	// files that client held wait (TestImagePoolFenceLong: about 60 s).
	ip.c.KillClient(t, "node-b")
	killed := time.Now()
	dead := marker.Write(b.Target, marker.Block(2), "b-dead")
	ip.c.Evict(t, "node-b")
	ip.unpublish(id, "node-b")
	pc, refusals, _ = ip.attachWhenAllowed(id, "node-a", 30*time.Second)
	t.Logf("node-b's client killed and evicted: node-a attached %v after the kill (%d refusals); node-b's write on its dead client: %v",
		time.Since(killed).Round(time.Millisecond), refusals, dead)
	a.Use(t, id, blockVC, pc)
	after := marker.Write(b.Target, marker.Block(3), "b-after")
	if after.OK() {
		t.Errorf("node-b's write after node-a attached succeeded")
	}
	for blk, text := range map[int64]string{2: "b-dead", 3: "b-after"} {
		if marker.Holds(t, ip.image(id), marker.Block(blk), text) {
			t.Errorf("node-b's write %q reached the image", text)
		}
	}
	if !marker.Holds(t, a.Target, marker.Block(0), "before") || !marker.Holds(t, a.Target, marker.Block(1), "b-first") {
		t.Error("node-a does not read what was written before node-b died")
	}
	if w := marker.Write(a.Target, marker.Block(4), "a-again"); !w.OK() || !marker.Holds(t, ip.image(id), marker.Block(4), "a-again") {
		t.Errorf("node-a's write: %v, or not in the storage", w)
	}
	a.detach(id)
	// node-b comes back with a new client; kubelet there unstages what its
	// dead pod left, which drops node-b's record of it, and the volume can
	// go.
	ip.c.RestartClient(t, "node-b")
	b.Release(t, id)
	if _, err := ip.ctrl.DeleteVolume(bg, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Errorf("DeleteVolume: %v", err)
	}
}

// TestImagePoolSnapshotsCloneExpand: on the CephFS (no reflink) the
// controller snapshots an xfs volume node-a has staged (node-a freezes
// it), restores the snapshot and clones the volume, node-b reads the file
// in each; the copies stay thin (the cluster holds no more objects of
// them than of the source), and the source grows online on node-a.
func TestImagePoolSnapshotsCloneExpand(t *testing.T) {
	ip := newImagePool(t, "node-a", "node-b")
	a, b := ip.nodes["node-a"], ip.nodes["node-b"]
	// xfs: online ext4 growth needs CAP_SYS_RESOURCE, which test
	// machines may lack (test/snapshot skips it then).
	const size = 320 << 20 // mkfs.xfs's least is 300 MiB
	id := ip.create("source", xfsVC, size, nil).GetVolumeId()
	took := a.attach(id, xfsVC)
	t.Logf("node-a: ControllerPublish + NodeStage (mkfs.xfs of 320 MiB) + NodePublish took %v", took.Round(time.Millisecond))
	data := bytes.Repeat([]byte("written on node-a "), 60000)
	if err := os.WriteFile(filepath.Join(a.Target, "file"), data, 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	snap, err := ip.ctrl.CreateSnapshot(bg, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CreateSnapshot of the staged 320 MiB volume (copy, frozen by node-a) took %v", time.Since(start).Round(time.Millisecond))
	snapID := snap.GetSnapshot().GetSnapshotId()
	src := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}}
	start = time.Now()
	restored := ip.create("restored", xfsVC, 2*size, src).GetVolumeId()
	t.Logf("CreateVolume of 640 MiB from the snapshot took %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	clone := ip.create("clone", xfsVC, size, &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
		Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: id}}}).GetVolumeId()
	t.Logf("CreateVolume cloning the staged volume took %v", time.Since(start).Round(time.Millisecond))

	objects := func(path string) int {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return ip.c.FileObjects(t, st.Sys().(*syscall.Stat_t).Ino)
	}
	srcObjs := objects(ip.image(id))
	for what, path := range map[string]string{"snapshot": filepath.Join(ip.storage, "snapshots", snapID+".img"),
		"restored volume": ip.image(restored), "clone": ip.image(clone)} {
		n := objects(path)
		t.Logf("%s: %d objects of 4 MiB in the data pool (the source %d of %d)", what, n, srcObjs, size>>22)
		if n > srcObjs {
			t.Errorf("%s: %d objects in the data pool, more than its source's %d: the copy wrote zeros", what, n, srcObjs)
		}
	}
	if srcObjs >= size>>22 {
		t.Errorf("the source has %d objects, as many as its size: the test proves nothing of thinness", srcObjs)
	}

	for _, v := range []string{restored, clone} {
		b.attach(v, xfsVC)
		if got, err := os.ReadFile(filepath.Join(b.Target, "file")); err != nil || !bytes.Equal(got, data) {
			t.Errorf("volume %s: file %d bytes, %v; want %d", v, len(got), err, len(data))
		}
		b.detach(v)
	}

	start = time.Now()
	if _, err := ip.ctrl.ControllerExpandVolume(bg, &csipb.ControllerExpandVolumeRequest{VolumeId: id,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 * size}, VolumeCapability: xfsVC}); err != nil {
		t.Fatalf("ControllerExpandVolume: %v", err)
	}
	if _, err := a.Client.NodeExpandVolume(bg, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: a.Target, StagingTargetPath: a.Staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 * size}, VolumeCapability: xfsVC}); err != nil {
		t.Fatalf("NodeExpandVolume: %v", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(a.Target, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("expanded online to 640 MiB in %v: the filesystem has %d MiB", time.Since(start).Round(time.Millisecond), st.Blocks*uint64(st.Bsize)>>20)
	if st.Blocks*uint64(st.Bsize) < size*3/2 {
		t.Errorf("after the expansion the filesystem has %d bytes, want about %d", st.Blocks*uint64(st.Bsize), 2*size)
	}
	a.detach(id)
	if _, err := ip.ctrl.DeleteSnapshot(bg, &csipb.DeleteSnapshotRequest{SnapshotId: snapID}); err != nil {
		t.Error(err)
	}
	for _, v := range []string{id, restored, clone} {
		if _, err := ip.ctrl.DeleteVolume(bg, &csipb.DeleteVolumeRequest{VolumeId: v}); err != nil {
			t.Errorf("DeleteVolume %s: %v", v, err)
		}
	}
}

// TestImagePoolRefusedOnACachingClient: filevol refuses to open a shared
// pool through a ceph-fuse client that keeps the kernel's page cache,
// naming the setting and its fix; allowed by
// --shared-pool-unsafe-allow=fuse-disable-pagecache, it serves the pool and
// says on every attach what is not guaranteed.
func TestImagePoolRefusedOnACachingClient(t *testing.T) {
	c := ceph.Shared(t)
	c.WaitForRoom(t)
	pool := filepath.Join(c.MountNode(t, "cached", "--fuse_disable_pagecache=false"), "caching-client", "pool")
	if err := os.MkdirAll(pool, 0o750); err != nil {
		t.Fatal(err)
	}
	dir := testutil.Scratch(t, "ceph-images")
	bin := proc.BuildDriver(t)
	args := []string{"--mode", "all", "--pool-shared", "--pool-name", imgPoolName, "--node-id", "cached",
		"--kubelet-dir", dir, "--pool-dir", pool, "--ceph-admin-socket-dir", c.RunDir()}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--endpoint", "unix://" + filepath.Join(dir, "refused.sock")}, args...)...).CombinedOutput()
	if err == nil {
		t.Fatalf("filevol started on a client with the page cache on:\n%s", out)
	}
	for _, want := range []string{"fuse-disable-pagecache: false (client.", "want true",
		"fix: set `fuse disable pagecache = true` in the [client] section of ceph.conf", "--shared-pool-unsafe-allow=fuse-disable-pagecache"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}
	p := proc.Start(t, bin, dir, "allowed", append(args, "--shared-pool-unsafe-allow=fuse-disable-pagecache")...)
	ctrl := csipb.NewControllerClient(p.Conn)
	r, err := ctrl.CreateVolume(bg, &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{blockVC},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetVolume().GetVolumeId()
	for range 2 {
		if _, err := ctrl.ControllerPublishVolume(bg, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "cached", VolumeCapability: blockVC}); err != nil {
			t.Fatal(err)
		}
		if _, err := ctrl.ControllerUnpublishVolume(bg, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "cached"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(p.LogText(), "attached to node cached on a shared pool whose filesystem lacks what fencing and coherence need, allowed by --shared-pool-unsafe-allow: fuse-disable-pagecache on "+pool); n != 2 {
		t.Errorf("the warning appears %d times for 2 attaches:\n%s", n, p.LogText())
	}
	if _, err := ctrl.DeleteVolume(bg, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Error(err)
	}
}
