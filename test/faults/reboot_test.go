package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// midOp is one way to interrupt an operation: SIGKILL at the nth step
// boundary after the call is sent, or after a delay.
type midOp struct {
	kind  string
	node  bool // expansion: interrupt NodeExpandVolume, not ControllerExpandVolume
	nth   int
	delay time.Duration
}

func (m midOp) String() string {
	where := ""
	if m.node {
		where = " node"
	}
	if m.nth > 0 {
		return fmt.Sprintf("%s%s kill at boundary %d", m.kind, where, m.nth)
	}
	return fmt.Sprintf("%s%s kill after %s", m.kind, where, m.delay)
}

// TestRebootMidOperation is the reboot test for the operations that
// change a volume in place: a volume mid-expansion and one mid-snapshot.
// The driver is SIGKILLed inside the call (at a step boundary the watcher
// sees, or after a delay), then the node "reboots" (no mounts, no loop
// devices, records on disk) and the driver starts again. The resizer,
// snapshotter and kubelet then do what they do after a reboot: retry the
// call, stage and publish; the volume must come back with its data, at
// its new size, and the snapshot must be complete and restorable. Each
// part skips unless the driver advertises the capability.
func TestRebootMidOperation(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	// Runs before Scratch's cleanup: a filesystem left frozen would stay
	// frozen, and its loop device busy, once unmounted.
	t.Cleanup(func() { thawUnder(dir) })
	bin := buildDriver(t)
	st := newStats()
	p := newProc(t, bin, dir)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	f, err := detectFeatures(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchKillPoints(p.pool, p.kubelet, st, p.current)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	m := &midRun{dir: dir, p: p, st: st, w: w, o: &ops{p: p, st: st, f: f}, rng: rand.New(rand.NewPCG(1, 2))}

	t.Run("Expansion", func(t *testing.T) {
		if !f.expand {
			t.Skip("ControllerGetCapabilities does not advertise EXPAND_VOLUME")
		}
		for _, c := range []midOp{
			{kind: "ext4", nth: 1}, {kind: "xfs", nth: 2}, {kind: "block", nth: 3}, {kind: "ext4", nth: 4},
			{kind: "ext4", delay: time.Millisecond}, {kind: "xfs", delay: 3 * time.Millisecond},
			{kind: "ext4", node: true, delay: 2 * time.Millisecond}, {kind: "ext4", node: true, delay: 15 * time.Millisecond},
			{kind: "xfs", node: true, delay: 10 * time.Millisecond}, {kind: "block", node: true, delay: time.Millisecond},
		} {
			if c.node && !f.nodeExpand {
				t.Logf("%v: skipped, NodeGetCapabilities does not advertise EXPAND_VOLUME", c)
				continue
			}
			m.run(t, "expand", c)
		}
	})
	t.Run("Snapshot", func(t *testing.T) {
		if !f.snapshot {
			t.Skip("ControllerGetCapabilities does not advertise CREATE_DELETE_SNAPSHOT")
		}
		for _, c := range []midOp{
			{kind: "ext4", nth: 1}, {kind: "xfs", nth: 2}, {kind: "block", nth: 3}, {kind: "ext4", nth: 4},
			{kind: "ext4", nth: 5}, {kind: "ext4", delay: 2 * time.Millisecond}, {kind: "xfs", delay: 20 * time.Millisecond},
		} {
			m.run(t, "snapshot", c)
		}
	})
	t.Run("SnapshotKilledThenRestarted", func(t *testing.T) {
		if !f.snapshot {
			t.Skip("ControllerGetCapabilities does not advertise CREATE_DELETE_SNAPSHOT")
		}
		for _, kind := range []string{"ext4", "xfs"} {
			m.restartOnly(t, kind)
		}
	})
	if err := p.stop(); err != nil {
		t.Error(err)
	}
}

// restartOnly kills the driver inside CreateSnapshot of a mounted volume
// (at the snapshot's first step boundary: its temporary image created,
// while the filesystem is frozen), restarts it without a reboot, and
// retries the call as the snapshotter does. The pod's filesystem must not
// stay frozen: its writers would hang until someone ran fsfreeze -u.
func (m *midRun) restartOnly(t *testing.T, kind string) {
	m.n++
	v := newVolume(m.dir, fmt.Sprintf("restart-snapshot-%d", m.n), kind)
	o := m.o
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\ndriver log:\n%s", v, err, m.p.logTail())
		}
	}
	must(o.create(v, nil))
	must(o.stageAndPublish(v))
	must(o.write(v, m.rng))
	m.w.arm("pool snapshots/.tmp-<sid>.img created")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	_, callErr := m.p.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: v.id, Name: "snap-" + v.name})
	cancel()
	point, fired := m.w.waitFired(time.Second, nil)
	m.p.kill()
	frozenAfterKill := frozenUnder(v.staging)
	must(m.p.start())
	must(o.takeSnapshot(v))
	frozen := frozenUnder(v.staging)
	thawUnder(v.staging) // whatever the verdict, so that cleanup works
	switch {
	case !fired:
		t.Logf("%s: the snapshot completed (%s) before the kill point", v, describe(callErr))
	case len(frozen) > 0:
		t.Errorf("BUG: %s: SIGKILL inside CreateSnapshot (at %q) left the filesystem frozen, and the retried CreateSnapshot "+
			"after the restart succeeded and left it frozen: %v. Every writer in the pod hangs until someone runs fsfreeze -u; "+
			"NodeUnstage would unmount a frozen filesystem whose superblock then stays frozen and keeps the loop device busy.",
			v, point, frozen)
	default:
		t.Logf("%s: killed at %q (frozen then: %v); after the restart the retried CreateSnapshot succeeded and the filesystem is thawed", v, point, frozenAfterKill)
	}
	must(o.verify(v))
	must(o.unpublishAndUnstage(v))
	must(o.restoreAndVerify(m.dir, v.snap))
	must(o.deleteSnapshot(v.snap))
	must(o.delete(v))
}

type midRun struct {
	dir string
	p   *proc
	st  *stats
	w   *watcher
	o   *ops
	rng *rand.Rand
	n   int
	// frozen counts kills that left a filesystem frozen.
	frozen int
}

func describe(err error) string {
	if err == nil {
		return "OK"
	}
	st, _ := status.FromError(err)
	if st.Code() == codes.Unavailable {
		return "UNAVAILABLE (killed)"
	}
	return st.Code().String() + " (" + st.Message() + ")"
}

// run makes a published volume with acknowledged data, interrupts op
// ("expand" or "snapshot") as c says, reboots, recovers like the
// sidecars and kubelet, verifies, cleans up and checks the invariants.
func (m *midRun) run(t *testing.T, op string, c midOp) {
	t.Helper()
	m.n++
	v := newVolume(m.dir, fmt.Sprintf("mid-%s-%d", op, m.n), c.kind)
	o := m.o
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s %v: %v\ndriver log:\n%s", op, c, err, m.p.logTail())
		}
	}
	must(o.create(v, nil))
	must(o.stageAndPublish(v))
	must(o.write(v, m.rng))
	before := fsBytes(v)
	want := v.size + 64<<20
	if op == "expand" && c.node {
		_, err := o.controllerExpand(v, want)
		must(err)
	}

	// The interrupted call, sent once.
	if c.nth > 0 {
		m.w.armNth(c.nth)
	}
	callDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		var err error
		switch {
		case op == "snapshot":
			_, err = m.p.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: v.id, Name: "snap-" + v.name})
		case c.node:
			_, err = m.p.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
				VolumeId: v.id, VolumePath: v.target, StagingTargetPath: v.staging,
				CapacityRange: &csipb.CapacityRange{RequiredBytes: want}, VolumeCapability: v.capability(),
			})
		default:
			_, err = m.p.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
				VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: want}, VolumeCapability: v.capability(),
			})
		}
		callDone <- err
	}()
	point := ""
	if c.nth > 0 {
		select {
		case point = <-m.w.fired:
		case err := <-callDone:
			// Fewer boundaries than nth: the call finished first.
			callDone <- err
			m.w.disarm()
			select {
			case point = <-m.w.fired:
			default:
				point = "after the call completed"
			}
		}
	} else {
		time.Sleep(c.delay)
		point = fmt.Sprintf("%s into the call", c.delay)
		m.p.killNow(fmt.Sprintf("the test, %s", point))
	}
	m.p.kill()
	callErr := <-callDone
	m.st.add(func(s *stats) { s.kills++; s.killPoints[op+": "+point]++ })
	if frozen := frozenUnder(m.dir); len(frozen) > 0 {
		// A reboot thaws it; a restart alone does not (TestKillAndRecover).
		t.Logf("%s %v: the kill left the filesystem frozen at %v", op, c, frozen)
		m.frozen++
	}
	thawUnder(m.dir)
	driver.SimulateReboot(t, m.dir)
	must(m.p.start())

	// What the sidecars and kubelet do after the reboot.
	switch op {
	case "expand":
		nodeNeeded, err := o.controllerExpand(v, want)
		must(err)
		must(o.stageAndPublish(v))
		if (nodeNeeded || c.node) && o.f.nodeExpand {
			must(o.nodeExpand(v))
		}
		must(checkSize(v, before))
		must(o.verify(v))
	case "snapshot":
		must(o.takeSnapshot(v))
		must(o.stageAndPublish(v))
		must(o.verify(v))
	}
	t.Logf("%s %v: killed at %q; the interrupted call answered %s; after the reboot the retried call completed and the data read back intact",
		op, c, point, describe(callErr))
	must(o.unpublishAndUnstage(v))
	if v.snap != nil {
		must(o.restoreAndVerify(m.dir, v.snap))
		must(o.deleteSnapshot(v.snap))
		v.snap = nil
	}
	must(o.delete(v))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, b := range checkInvariants(ctx, m.p, o.f, state{volumes: map[string]*volume{}, published: nil}) {
		t.Errorf("%s %v, after cleanup: %s", op, c, b)
	}
}
