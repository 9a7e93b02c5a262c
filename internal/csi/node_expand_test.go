package csi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

func (e *nodeEnv) expand(id, path, staging string, required int64) (*csipb.NodeExpandVolumeResponse, error) {
	return e.node.NodeExpandVolume(context.Background(), &csipb.NodeExpandVolumeRequest{
		VolumeId: id, VolumePath: path, StagingTargetPath: staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: required}})
}

// growImage is ControllerExpandVolume's part: the image grows, the
// attached device does not see it yet.
func (e *nodeEnv) growImage(id string, size int64) {
	e.t.Helper()
	if _, err := e.pool.Expand(context.Background(), id, size, size); err != nil {
		e.t.Fatal(err)
	}
}

func TestNodeExpandVolumeMount(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging, target := e.staging("a"), e.target("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	e.mustPublish(id, staging, target, capMount("ext4", rw), false)
	e.growImage(id, 128<<20)

	resp, err := e.expand(id, target, staging, 128<<20)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCapacityBytes() != 128<<20 {
		t.Errorf("capacity %d", resp.GetCapacityBytes())
	}
	if d := e.devices(id)[0]; d.SizeBytes != 128<<20 {
		t.Errorf("device size %d: LOOP_SET_CAPACITY not done", d.SizeBytes)
	}
	if _, size := e.k.Signature(e.image(id)); size != 128<<20 {
		t.Errorf("filesystem of %d bytes, want 128 MiB", size)
	}
	// Grown at the mount of the filesystem's root: the staging mount.
	if want := fmt.Sprintf("grow /dev/loop0 %s ext4", staging); !slices.Contains(e.k.Log(), want) {
		t.Errorf("log %v lacks %q", e.k.Log(), want)
	}
	grows := e.k.Calls("grow")
	if _, err := e.expand(id, target, staging, 128<<20); err != nil {
		t.Fatal(err)
	}
	if e.k.Calls("grow") != grows {
		t.Error("a filesystem that fills its device was grown again")
	}
}

// A controller without the node's pool leaves the image's growth to the
// node: required_bytes above the image's size grows the image here.
func TestNodeExpandVolumeGrowsImageOnNode(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	resp, err := e.expand(id, staging, staging, 100<<20)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(e.image(id))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < 100<<20 || resp.GetCapacityBytes() != st.Size() {
		t.Errorf("image %d bytes, response %d, want at least 100 MiB and equal", st.Size(), resp.GetCapacityBytes())
	}
	if _, size := e.k.Signature(e.image(id)); size != st.Size() {
		t.Errorf("filesystem %d bytes, device %d", size, st.Size())
	}
}

func TestNodeExpandVolumeBlock(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capBlock(rw))
	e.growImage(id, 96<<20)
	// kubelet passes the staging path for a staged block volume.
	if _, err := e.expand(id, staging, staging, 96<<20); err != nil {
		t.Fatal(err)
	}
	if d := e.devices(id)[0]; d.SizeBytes != 96<<20 {
		t.Errorf("device size %d", d.SizeBytes)
	}
	if e.k.Calls("grow")+e.k.Calls("fs-size") != 0 {
		t.Errorf("a block volume's filesystem was looked at: %v", e.k.Log())
	}
}

func TestNodeExpandVolumeRefusals(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	if _, err := e.pool.CommitImage(mustGet(t, e, id)); err != nil {
		t.Fatal(err)
	}
	_, err := e.expand(id, staging, staging, 0)
	wantCode(t, "expand of an unstaged volume", err, codes.FailedPrecondition)

	e.mustStage(id, staging, capMount("ext4", rw))
	elsewhere := filepath.Join(e.kubelet, "elsewhere")
	_, err = e.expand(id, elsewhere, "", 0)
	wantCode(t, "expand at a path where nothing is mounted", err, codes.NotFound)

	other := e.volume("b", "ext4", 64<<20)
	e.mustStage(other, e.staging("b"), capMount("ext4", rw))
	_, err = e.expand(id, e.staging("b"), "", 0)
	wantCode(t, "expand at another volume's mount", err, codes.NotFound)

	_, err = e.expand("", staging, staging, 0)
	wantCode(t, "no ID", err, codes.InvalidArgument)
	_, err = e.expand(id, "", staging, 0)
	wantCode(t, "no path", err, codes.InvalidArgument)
	_, err = e.expand("fv-"+strings.Repeat("0", 32), "relative", "", 0)
	wantCode(t, "unknown volume, relative path", err, codes.NotFound)
}

func mustGet(t *testing.T, e *nodeEnv, id string) volume.Volume {
	t.Helper()
	v, err := e.pool.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Online ext4 growth without CAP_SYS_RESOURCE: FAILED_PRECONDITION that
// says the next stage grows it, the device already at its new size.
func TestNodeExpandVolumeWithoutCapability(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	e.growImage(id, 128<<20)
	e.k.Fail("Grow", fmt.Errorf("resize2fs: %w", fs.ErrCapability))
	_, err := e.expand(id, staging, staging, 128<<20)
	wantCode(t, "expand without the capability", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "NodeStageVolume") {
		t.Errorf("message %q does not say what grows it", err)
	}
	if d := e.devices(id)[0]; d.SizeBytes != 128<<20 {
		t.Errorf("device size %d", d.SizeBytes)
	}
}

func TestNodeExpandVolumeReadOnlyNotGrown(t *testing.T) {
	e := newNodeEnv(t)
	id := e.committed("a", "ext4", 64<<20)
	e.k.SetSignature(e.image(id), "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capMount("ext4", ro))
	e.growImage(id, 128<<20)
	if _, err := e.expand(id, staging, staging, 128<<20); err != nil {
		t.Fatal(err)
	}
	if n := e.k.Calls("grow"); n != 0 {
		t.Errorf("read-only filesystem grown")
	}
}

func (e *nodeEnv) stats(id, path string) (*csipb.NodeGetVolumeStatsResponse, error) {
	return e.node.NodeGetVolumeStats(context.Background(), &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
}

func TestNodeGetVolumeStats(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging, target := e.staging("a"), e.target("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	e.mustPublish(id, staging, target, capMount("ext4", rw), false)
	e.k.SetStats(e.image(id), fs.Stats{TotalBytes: 60 << 20, AvailableBytes: 50 << 20, UsedBytes: 10 << 20,
		TotalInodes: 100, FreeInodes: 90, UsedInodes: 10})
	resp, err := e.stats(id, target)
	if err != nil {
		t.Fatal(err)
	}
	u := resp.GetUsage()
	if len(u) != 2 || u[0].GetUnit() != csipb.VolumeUsage_BYTES || u[0].GetUsed() != 10<<20 ||
		u[1].GetUnit() != csipb.VolumeUsage_INODES || u[1].GetAvailable() != 90 {
		t.Errorf("usage %v", u)
	}

	// btrfs reports no inodes: no INODES entry rather than "0 of 0 free".
	b := e.volume("b", "btrfs", 256<<20)
	e.mustStage(b, e.staging("b"), capMount("btrfs", rw))
	resp, err = e.stats(b, e.staging("b"))
	if err != nil {
		t.Fatal(err)
	}
	if u := resp.GetUsage(); len(u) != 1 || u[0].GetTotal() != 256<<20 {
		t.Errorf("btrfs usage %v", u)
	}

	_, err = e.stats(id, filepath.Join(e.kubelet, "missing"))
	wantCode(t, "stats of a missing path", err, codes.NotFound)
	plain := filepath.Join(e.kubelet, "plain")
	if err := os.MkdirAll(plain, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err = e.stats(id, plain)
	wantCode(t, "stats where nothing is mounted", err, codes.NotFound)
	_, err = e.stats(id, e.staging("b"))
	wantCode(t, "stats at another volume's mount", err, codes.NotFound)
	_, err = e.stats(id, "relative")
	wantCode(t, "stats of a relative path", err, codes.NotFound)
	_, err = e.stats("", target)
	wantCode(t, "stats without ID", err, codes.InvalidArgument)
}

func TestNodeGetVolumeStatsBlock(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging, target := e.staging("a"), e.target("a")
	e.mustStage(id, staging, capBlock(rw))
	e.mustPublish(id, staging, target, capBlock(rw), false)
	resp, err := e.stats(id, target)
	if err != nil {
		t.Fatal(err)
	}
	if u := resp.GetUsage(); len(u) != 1 || u[0].GetTotal() != 64<<20 {
		t.Errorf("usage %v", u)
	}
	// The device detached under the bind (by hand): no size to report.
	dev := e.devices(id)[0]
	if err := e.k.Detach(dev.Path); err != nil {
		t.Fatal(err)
	}
	if m, ok := e.top(target); !ok || !volview.IsDeviceBind(m) {
		t.Fatalf("the bind went with the device: %+v", m)
	}
	_, err = e.stats(id, target)
	wantCode(t, "stats of a detached device", err, codes.FailedPrecondition)
}

func TestNodeGetVolumeHealth(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging, target := e.staging("a"), e.target("a")
	e.mustStage(id, staging, capMount("ext4", rw))
	e.mustPublish(id, staging, target, capMount("ext4", rw), false)
	health := func() []string {
		t.Helper()
		resp, err := e.node.NodeGetVolumeHealth(context.Background(), &csipb.NodeGetVolumeHealthRequest{
			VolumeId: id, VolumePublishPath: target, StagingTargetPath: staging})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range resp.GetVolumeHealth().GetHealthStatuses() {
			out = append(out, s.GetReason())
		}
		return out
	}
	if got := health(); len(got) != 0 {
		t.Errorf("healthy volume reported %v", got)
	}
	if err := e.k.RemountReadOnly(staging); err != nil {
		t.Fatal(err)
	}
	if got := health(); len(got) != 1 || got[0] != volume.ReasonFilesystemReadOnly {
		t.Errorf("after the kernel remounted it read-only: %v", got)
	}

	b := e.volume("b", "ext4", 64<<20)
	bStaging, bTarget := e.staging("b"), e.target("b")
	e.mustStage(b, bStaging, capBlock(rw))
	e.mustPublish(b, bStaging, bTarget, capBlock(rw), false)
	if err := e.k.Detach(e.devices(b)[0].Path); err != nil {
		t.Fatal(err)
	}
	resp, err := e.node.NodeGetVolumeHealth(context.Background(), &csipb.NodeGetVolumeHealthRequest{VolumeId: b, VolumePublishPath: bTarget})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetVolumeHealth().GetHealthStatuses(); len(st) != 1 || st[0].GetReason() != volume.ReasonLoopDeviceGone {
		t.Errorf("block volume whose device was detached: %v", st)
	}
}

// The collector detaches a device nothing uses (a crash between attach and
// mount) and leaves staged and published ones alone.
func TestGCDetachesUnusedLoops(t *testing.T) {
	e := newNodeEnv(t)
	used := e.volume("used", "ext4", 64<<20)
	e.mustStage(used, e.staging("used"), capMount("ext4", rw))
	block := e.volume("block", "ext4", 64<<20)
	e.mustStage(block, e.staging("block"), capBlock(rw))
	leaked := e.committed("leaked", "ext4", 64<<20)
	d, err := e.k.Attach(context.Background(), e.image(leaked), loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.node.GC(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.DetachedLoops) != 1 || r.DetachedLoops[0] != d.Path {
		t.Errorf("detached %v, want only %s", r.DetachedLoops, d.Path)
	}
	if len(e.devices(used)) != 1 || len(e.devices(block)) != 1 || len(e.devices(leaked)) != 0 {
		t.Errorf("devices after GC: used %v block %v leaked %v", e.devices(used), e.devices(block), e.devices(leaked))
	}
	// A device of a volume with a call in flight is left for the next sweep.
	if _, err = e.k.Attach(context.Background(), e.image(leaked), loop.Options{}); err != nil {
		t.Fatal(err)
	}
	unlock, err := e.node.locks.tryLock(leaked)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = e.node.GC(context.Background()); err != nil || len(r.DetachedLoops) != 0 {
		t.Errorf("GC during a call on the volume: %v, %v", r.DetachedLoops, err)
	}
	unlock()
}
