package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/testutil"
)

// A shared pool's attach and detach under SIGKILL: a controller process
// and two node processes on one pool directory; the controller is killed
// at every step boundary of ControllerPublishVolume and
// ControllerUnpublishVolume, node-a at every boundary of NodeStageVolume
// and NodeUnstageVolume (the watcher of killpoints_test.go names them).
// After the restart the call is retried, as external-attacher and kubelet
// retry, and the volume goes on to node-b. Checked every time: never two
// nodes attached nor two loop devices on the image (0 double writers),
// the attachment record what the calls said, and once the volume is
// deleted nothing left: no loop device, mount, record, lock or temporary
// file.

const sharedPoolName = "faults-shared"

type sharedPool struct {
	t      *testing.T
	dir    string
	pool   string
	bin    string
	ctrl   *proc
	nodes  map[string]*proc
	target atomic.Pointer[proc] // the process a kill point is armed for
	w      *watcher
	st     *stats
	kills  map[string]int // by operation
	vols   int
}

func newSharedPool(t *testing.T) *sharedPool {
	testutil.RequireRoot(t)
	sp := &sharedPool{t: t, dir: testutil.Scratch(t, "faults-shared"), st: newStats(), nodes: map[string]*proc{}, kills: map[string]int{}}
	sp.pool = filepath.Join(sp.dir, "pool")
	if err := os.MkdirAll(sp.pool, 0o750); err != nil {
		t.Fatal(err)
	}
	sp.bin = buildDriver(t, t.TempDir())
	sp.ctrl = sp.newProc("ctrl", "controller")
	for _, n := range []string{"node-a", "node-b"} {
		sp.nodes[n] = sp.newProc(n, "node")
	}
	w, err := watchKillPoints(sp.pool, sp.dir, sp.st, func() *instance {
		if p := sp.target.Load(); p != nil {
			return p.current()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sp.w = w
	t.Cleanup(w.close)
	return sp
}

func (sp *sharedPool) newProc(name, mode string) *proc {
	p := newProc(sp.t, sp.bin, filepath.Join(sp.dir, name))
	p.extraArgs = []string{"--mode", mode, "--pool-shared", "--pool-name", sharedPoolName, "--pool-dir", sp.pool, "--node-id", name}
	if err := p.start(); err != nil {
		sp.t.Fatal(err)
	}
	return p
}

var sharedCap = &csipb.VolumeCapability{
	AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
}

// sharedOp is one call killed at its boundaries: setup brings a fresh
// volume to the state before the call, call makes it, after checks the
// state after it and takes the volume to node-b.
type sharedOp struct {
	name   string
	victim func(sp *sharedPool) *proc
	setup  func(sp *sharedPool, id string)
	call   func(sp *sharedPool, id string) error
	after  func(sp *sharedPool, id string)
}

// TestSharedPoolKillPoints kills at the nth boundary of each call, n = 1,
// 2, ... until the call ends before its nth boundary.
func TestSharedPoolKillPoints(t *testing.T) {
	sp := newSharedPool(t)
	ops := []sharedOp{
		{
			name: "ControllerPublishVolume", victim: func(sp *sharedPool) *proc { return sp.ctrl },
			setup: func(*sharedPool, string) {},
			call:  func(sp *sharedPool, id string) error { return sp.publish(id, "node-a") },
			after: func(sp *sharedPool, id string) {
				sp.wantAttached(id, "node-a")
				sp.stage("node-a", id)
				sp.unstage("node-a", id)
				sp.mustOK("unpublish node-a", sp.unpublish(id, "node-a"))
				sp.toNodeB(id)
			},
		},
		{
			name: "ControllerUnpublishVolume", victim: func(sp *sharedPool) *proc { return sp.ctrl },
			setup: func(sp *sharedPool, id string) { sp.mustOK("publish node-a", sp.publish(id, "node-a")) },
			call:  func(sp *sharedPool, id string) error { return sp.unpublish(id, "node-a") },
			after: func(sp *sharedPool, id string) { sp.wantAttached(id); sp.toNodeB(id) },
		},
		{
			name: "NodeStageVolume", victim: func(sp *sharedPool) *proc { return sp.nodes["node-a"] },
			setup: func(sp *sharedPool, id string) { sp.mustOK("publish node-a", sp.publish(id, "node-a")) },
			call:  func(sp *sharedPool, id string) error { return sp.stageErr("node-a", id) },
			after: func(sp *sharedPool, id string) {
				// Staged on A: B is refused, even force-detached from A.
				if err := sp.publish(id, "node-b"); status.Code(err) != codes.FailedPrecondition {
					sp.t.Fatalf("publish to node-b while node-a has it staged: %v", err)
				}
				sp.mustOK("force-detach node-a", sp.unpublish(id, "node-a"))
				if err := sp.publish(id, "node-b"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "still holds the image") {
					sp.t.Fatalf("publish to node-b while node-a's device holds the image: %v; want fenced", err)
				}
				sp.unstage("node-a", id)
				sp.toNodeB(id)
			},
		},
		{
			name: "NodeUnstageVolume", victim: func(sp *sharedPool) *proc { return sp.nodes["node-a"] },
			setup: func(sp *sharedPool, id string) {
				sp.mustOK("publish node-a", sp.publish(id, "node-a"))
				sp.stage("node-a", id)
			},
			call: func(sp *sharedPool, id string) error { return sp.unstageErr("node-a", id) },
			after: func(sp *sharedPool, id string) {
				if devs := sp.loopsOf(id); len(devs) != 0 {
					sp.t.Fatalf("after NodeUnstageVolume: %d loop devices on the image", len(devs))
				}
				sp.mustOK("unpublish node-a", sp.unpublish(id, "node-a"))
				sp.toNodeB(id)
			},
		},
	}
	for _, op := range ops {
		for n := 1; ; n++ {
			if n > 60 {
				t.Fatalf("%s: more than 60 boundaries", op.name)
			}
			fired := sp.round(op, n)
			if !fired {
				t.Logf("%s: killed at each of its %d boundaries", op.name, n-1)
				break
			}
		}
	}
	var points []string
	for p, k := range sp.st.killPoints {
		points = append(points, fmt.Sprintf("%s ×%d", p, k))
	}
	sort.Strings(points)
	t.Logf("%d volumes, kills by call %v; by boundary:\n  %s", sp.vols, sp.kills, strings.Join(points, "\n  "))
}

// round runs op on a fresh volume with a kill armed at its nth boundary,
// and reports whether it fired.
func (sp *sharedPool) round(op sharedOp, n int) bool {
	sp.vols++
	id := sp.create(fmt.Sprintf("kp-%d", sp.vols))
	op.setup(sp, id)
	victim := op.victim(sp)
	sp.target.Store(victim)
	sp.w.armNth(n)
	err := op.call(sp, id)
	point, fired := sp.w.waitFired(200*time.Millisecond, nil)
	sp.target.Store(nil)
	if fired {
		sp.kills[op.name]++
		sp.st.add(func(s *stats) { s.killPoints[point]++ })
		victim.kill()
		if err := victim.start(); err != nil {
			sp.t.Fatal(err)
		}
		sp.checkNoDoubleWriter(id)
		err = sp.retry(op.name, func() error { return op.call(sp, id) })
	}
	sp.mustOK(op.name, err)
	sp.checkNoDoubleWriter(id)
	op.after(sp, id)
	sp.delete(id)
	return fired
}

// retry retries a call as the CO does, while it fails with a code a
// restarted driver may give (UNAVAILABLE while it starts, ABORTED while
// an operation is in progress).
func (sp *sharedPool) retry(what string, f func() error) error {
	var err error
	for range 50 {
		err = f()
		if c := status.Code(err); c != codes.Unavailable && c != codes.Aborted && c != codes.DeadlineExceeded {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s still failing after 50 tries: %w", what, err)
}

func (sp *sharedPool) mustOK(what string, err error) {
	sp.t.Helper()
	if err != nil {
		sp.t.Fatalf("%s: %v\ncontroller log:\n%s", what, err, sp.ctrl.logTail())
	}
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

func (sp *sharedPool) create(name string) string {
	sp.t.Helper()
	var id string
	sp.mustOK("create "+name, sp.retry("create", func() error {
		ctx, cancel := callCtx()
		defer cancel()
		v, err := sp.ctrl.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{sharedCap},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 << 20}})
		id = v.GetVolume().GetVolumeId()
		return err
	}))
	return id
}

func (sp *sharedPool) delete(id string) {
	sp.t.Helper()
	sp.mustOK("delete", sp.retry("delete", func() error {
		ctx, cancel := callCtx()
		defer cancel()
		_, err := sp.ctrl.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
		return err
	}))
	sp.checkNothingLeft(id)
}

func (sp *sharedPool) publish(id, node string) error {
	ctx, cancel := callCtx()
	defer cancel()
	_, err := sp.ctrl.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: sharedCap})
	return err
}

func (sp *sharedPool) unpublish(id, node string) error {
	ctx, cancel := callCtx()
	defer cancel()
	_, err := sp.ctrl.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node})
	return err
}

func (sp *sharedPool) staging(node string) string {
	return filepath.Join(sp.nodes[node].kubelet, "staging")
}

// stageErr stages the volume on node with the publish_context of the
// pool's record (what external-attacher stored in the VolumeAttachment).
func (sp *sharedPool) stageErr(node, id string) error {
	rec, err := attach.New(sp.pool).Of(id)
	if err != nil {
		return err
	}
	a, _ := rec.Find(node)
	ctx, cancel := callCtx()
	defer cancel()
	_, err = sp.nodes[node].node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: sp.staging(node),
		VolumeCapability: sharedCap, PublishContext: map[string]string{"filevol.csi.io/node": node, "filevol.csi.io/attach-epoch": fmt.Sprint(a.Epoch)}})
	return err
}

func (sp *sharedPool) stage(node, id string) {
	sp.t.Helper()
	sp.mustOK("stage on "+node, sp.retry("stage", func() error { return sp.stageErr(node, id) }))
}

func (sp *sharedPool) unstageErr(node, id string) error {
	ctx, cancel := callCtx()
	defer cancel()
	_, err := sp.nodes[node].node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: sp.staging(node)})
	return err
}

func (sp *sharedPool) unstage(node, id string) {
	sp.t.Helper()
	sp.mustOK("unstage on "+node, sp.retry("unstage", func() error { return sp.unstageErr(node, id) }))
}

// toNodeB attaches and stages the volume on node-b, then takes it back.
func (sp *sharedPool) toNodeB(id string) {
	sp.t.Helper()
	sp.mustOK("publish node-b", sp.publish(id, "node-b"))
	sp.wantAttached(id, "node-b")
	sp.stage("node-b", id)
	sp.checkNoDoubleWriter(id)
	sp.unstage("node-b", id)
	sp.mustOK("unpublish node-b", sp.unpublish(id, "node-b"))
	sp.wantAttached(id)
}

// wantAttached: the pool's record holds exactly these nodes.
func (sp *sharedPool) wantAttached(id string, nodes ...string) {
	sp.t.Helper()
	rec, err := attach.New(sp.pool).Of(id)
	if err != nil {
		sp.t.Fatal(err)
	}
	if got := rec.Nodes(); strings.Join(got, ",") != strings.Join(nodes, ",") {
		sp.t.Fatalf("volume %s attached to %v, want %v", id, got, nodes)
	}
}

// checkNoDoubleWriter: at most one node attached, at most one node with
// the volume staged (the pool's in-use records), at most one loop device
// on the image.
func (sp *sharedPool) checkNoDoubleWriter(id string) {
	sp.t.Helper()
	rec, err := attach.New(sp.pool).Of(id)
	if err != nil {
		sp.t.Fatal(err)
	}
	if len(rec.Attachments) > 1 {
		sp.t.Fatalf("DOUBLE WRITER: volume %s attached to %v", id, rec.Nodes())
	}
	if devs := sp.loopsOf(id); len(devs) > 1 {
		sp.t.Fatalf("DOUBLE WRITER: %d loop devices on the image of %s", len(devs), id)
	}
	staged, err := inuse.New(sp.pool).Of(id)
	if err != nil {
		sp.t.Fatal(err)
	}
	if nodes := slices.Compact(slices.Sorted(slices.Values(inuse.Nodes(staged)))); len(nodes) > 1 {
		sp.t.Fatalf("DOUBLE WRITER: volume %s staged on %v", id, nodes)
	}
}

func (sp *sharedPool) loopsOf(id string) []loop.Device {
	devs, err := loop.List()
	if err != nil {
		sp.t.Fatal(err)
	}
	var out []loop.Device
	for _, d := range devs {
		if strings.HasPrefix(d.BackingFile, sp.pool+"/") && strings.Contains(d.BackingFile, id) {
			out = append(out, d)
		}
	}
	return out
}

// checkNothingLeft: no file in the pool names the deleted volume, no loop
// device or mount of the test is left.
func (sp *sharedPool) checkNothingLeft(id string) {
	sp.t.Helper()
	_ = filepath.WalkDir(sp.pool, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), id) {
			sp.t.Errorf("left in the pool after delete: %s", strings.TrimPrefix(path, sp.pool+"/"))
		}
		return nil
	})
	if devs := sp.loopsOf(id); len(devs) != 0 {
		sp.t.Errorf("loop device left on the image of %s: %v", id, devs)
	}
	table, err := mount.Read()
	if err != nil {
		sp.t.Fatal(err)
	}
	for _, m := range table.Under(sp.dir) {
		sp.t.Errorf("mount left at %s", m.MountPoint)
	}
	if sp.t.Failed() {
		sp.t.FailNow()
	}
}
