package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/testutil"
)

var groupStrideFlag = flag.Int("group-stride", 0, "TestKillDuringGroupSnapshot: kill at every nth step boundary (default: every one in a long run, every 3rd in the short run of make test)")

// groupStride is how many boundaries apart the group rounds kill.
func groupStride() int {
	switch {
	case *groupStrideFlag > 0:
		return *groupStrideFlag
	case *iterationsFlag > 0 || os.Getenv("FAULTS_ITERATIONS") != "":
		return 1 // make faults
	}
	return 3
}

// TestKillDuringGroupSnapshot kills the driver at every step boundary of
// a CreateVolumeGroupSnapshot of three mounted volumes (the freeze
// requests and answers, every member's temporary record and image, their
// renames, the group record), one boundary per round, and then at every
// boundary of its DeleteVolumeGroupSnapshot. A writer keeps a counter rule
// across two of the volumes throughout (counter c to the first, then to
// the second, buffered, never fsynced). After each kill and restart:
//
//   - no filesystem is frozen (a writer blocked on one would hang the pod);
//   - the group is whole or invisible: GetVolumeGroupSnapshot is NOT_FOUND
//     and ListSnapshots shows none of its members, or it has them all;
//   - the retried call completes, and the group it returns, restored,
//     keeps the writer's rule: its members were cut at one instant.
func TestKillDuringGroupSnapshot(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	t.Cleanup(func() { thawUnder(dir) })
	bin := buildDriver(t)
	st := newStats()
	p := newProc(t, bin, dir)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	w, err := watchKillPoints(p.pool, p.kubelet, st, p.current)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	g := &groupRun{t: t, dir: dir, p: p, w: w, o: &ops{p: p, st: st}, gc: csipb.NewGroupControllerClient(p.conn)}
	var vols []*volume
	for i, kind := range []string{"xfs", "ext4", "xfs"} {
		v := newVolume(dir, fmt.Sprintf("group-%d", i), kind)
		g.must(g.o.create(v, nil))
		g.must(g.o.stageAndPublish(v))
		vols = append(vols, v)
	}
	g.vols = vols
	wr := startRule(t, vols[0].target, vols[1].target)
	defer wr.halt(t)

	creates, deletes := 0, 0
	stride := groupStride()
	for n := 1; ; n += stride {
		killed, point := g.round(fmt.Sprintf("g%d", n), n, true)
		if !killed {
			break
		}
		creates++
		t.Logf("create, boundary %d (%s): recovered", n, point)
	}
	for n := 1; ; n += stride {
		killed, point := g.round(fmt.Sprintf("d%d", n), n, false)
		if !killed {
			break
		}
		deletes++
		t.Logf("delete, boundary %d (%s): recovered", n, point)
	}
	if creates == 0 || deletes == 0 {
		t.Errorf("killed %d creates and %d deletes: the watcher saw no boundary of one of them", creates, deletes)
	}
	t.Logf("killed CreateVolumeGroupSnapshot at %d boundaries and DeleteVolumeGroupSnapshot at %d; the writer reached %d", creates, deletes, wr.n.Load())
	wr.halt(t)
	for _, v := range vols {
		g.must(g.o.unpublishAndUnstage(v))
		g.must(g.o.delete(v))
	}
	for _, b := range checkInvariants(context.Background(), p, features{snapshot: true}, state{volumes: map[string]*volume{}}) {
		t.Errorf("at the end: %s", b)
	}
}

type groupRun struct {
	t    *testing.T
	dir  string
	p    *proc
	w    *watcher
	o    *ops
	gc   csipb.GroupControllerClient
	vols []*volume
}

func (g *groupRun) must(err error) {
	g.t.Helper()
	if err != nil {
		g.t.Fatalf("%v\ndriver log:\n%s", err, g.p.logTail())
	}
}

func (g *groupRun) ids() []string {
	var out []string
	for _, v := range g.vols {
		out = append(out, v.id)
	}
	return out
}

// round makes a group called name and, with create, kills its create at
// the nth boundary; without, makes it whole first and kills its delete
// there. It reports whether the kill fired (false: the call has fewer
// boundaries than n, and the round is the last).
func (g *groupRun) round(name string, n int, create bool) (bool, string) {
	t := g.t
	var grp *csipb.VolumeGroupSnapshot
	if !create {
		grp = g.createGroup(name)
	}
	g.w.armNth(n)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		var err error
		if create {
			_, err = g.gc.CreateVolumeGroupSnapshot(ctx, &csipb.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: g.ids()})
		} else {
			_, err = g.gc.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId(), SnapshotIds: memberIDs(grp)})
		}
		done <- err
	}()
	var point string
	var callErr error
	select {
	case point = <-g.w.fired:
		callErr = <-done
	case callErr = <-done:
		g.w.disarm()
		select {
		case point = <-g.w.fired:
		default:
		}
	}
	if point == "" {
		// Fewer boundaries than n: the call ran whole.
		if callErr != nil {
			t.Fatalf("%s: the call, not killed, failed: %v", name, callErr)
		}
		if create {
			grp = g.createGroup(name) // its answer, again
			g.verify(name, grp)
		}
		g.deleteGroup(grp)
		return false, ""
	}
	g.p.kill()
	g.must(g.p.start())
	// The restarted node thaws what its predecessor froze before it serves.
	if frozen := frozenUnder(g.dir); len(frozen) > 0 {
		thawUnder(g.dir)
		t.Fatalf("%s: killed at %q, the restarted driver left %v frozen", name, point, frozen)
	}
	gid := g.visibleGroup(name, point)
	if create {
		grp = g.createGroup(name)
		if gid != "" && grp.GetGroupSnapshotId() != gid {
			t.Errorf("%s: the retried create returned group %s, not the visible %s", name, grp.GetGroupSnapshotId(), gid)
		}
		g.verify(name, grp)
	}
	// Killed during its delete, the group is whole (the delete had not
	// marked it yet) or gone: visibleGroup checked; the retry finishes it.
	g.deleteGroup(grp)
	return true, point
}

// visibleGroup checks that the group called name is whole or invisible
// after a kill, and returns its ID if it is visible.
func (g *groupRun) visibleGroup(name, point string) string {
	t := g.t
	ctx := context.Background()
	var members []*csipb.Snapshot
	var gid string
	g.must(g.o.call("ListSnapshots", name, func(ctx context.Context) error {
		members = nil
		resp, err := g.p.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{})
		for _, e := range resp.GetEntries() {
			if s := e.GetSnapshot(); s.GetGroupSnapshotId() != "" {
				members, gid = append(members, s), s.GetGroupSnapshotId()
			}
		}
		return err
	}))
	if len(members) == 0 {
		return ""
	}
	resp, err := g.gc.GetVolumeGroupSnapshot(ctx, &csipb.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gid})
	switch {
	case err != nil:
		t.Errorf("%s: killed at %q: %d member(s) of group %s visible, but the group is not (%v): a half group", name, point, len(members), gid, err)
	case len(members) != len(g.vols) || len(resp.GetGroupSnapshot().GetSnapshots()) != len(g.vols):
		t.Errorf("%s: killed at %q: group %s visible with %d member(s) listed and %d in the group, want %d: a half group",
			name, point, gid, len(members), len(resp.GetGroupSnapshot().GetSnapshots()), len(g.vols))
	}
	return gid
}

func (g *groupRun) createGroup(name string) *csipb.VolumeGroupSnapshot {
	var grp *csipb.VolumeGroupSnapshot
	g.must(g.o.call("CreateVolumeGroupSnapshot", name, func(ctx context.Context) error {
		resp, err := g.gc.CreateVolumeGroupSnapshot(ctx, &csipb.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: g.ids()})
		grp = resp.GetGroupSnapshot()
		return err
	}))
	if len(grp.GetSnapshots()) != len(g.vols) {
		g.t.Fatalf("%s: group with %d members, want %d", name, len(grp.GetSnapshots()), len(g.vols))
	}
	return grp
}

func (g *groupRun) deleteGroup(grp *csipb.VolumeGroupSnapshot) {
	g.must(g.o.call("DeleteVolumeGroupSnapshot", grp.GetGroupSnapshotId(), func(ctx context.Context) error {
		_, err := g.gc.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: grp.GetGroupSnapshotId()})
		return err
	}))
	for _, id := range memberIDs(grp) {
		resp, err := g.p.ctrl.ListSnapshots(context.Background(), &csipb.ListSnapshotsRequest{SnapshotId: id})
		if (err != nil && status.Code(err) != codes.NotFound) || len(resp.GetEntries()) > 0 {
			g.t.Errorf("ListSnapshots %s after the group's delete: %v, %v", id, resp, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(g.p.pool, "groups", "*.json")); len(left) > 0 {
		g.t.Errorf("group records left after the delete: %v", left)
	}
}

// verify restores the first two members (the writer's pair), mounts
// them and checks the rule.
func (g *groupRun) verify(name string, grp *csipb.VolumeGroupSnapshot) {
	var restored []*volume
	for i := range 2 {
		v := newVolume(g.dir, fmt.Sprintf("%s-r%d", name, i), g.vols[i].kind)
		src := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: grp.GetSnapshots()[i].GetSnapshotId()}}}
		g.must(g.o.create(v, src))
		g.must(g.o.stageAndPublish(v))
		restored = append(restored, v)
	}
	a, errA := readRule(filepath.Join(restored[0].target, ruleFile))
	b, errB := readRule(filepath.Join(restored[1].target, ruleFile))
	if err := errors.Join(errA, errB); err != nil {
		g.t.Errorf("%s: read the restored counters: %v", name, err)
	} else if a != b && a != b+1 {
		g.t.Errorf("%s: restored counters %d and %d break the writer's rule (first = second or second+1): the members were not cut at one instant", name, a, b)
	}
	for _, v := range restored {
		g.must(g.o.unpublishAndUnstage(v))
		g.must(g.o.delete(v))
	}
}

func memberIDs(grp *csipb.VolumeGroupSnapshot) []string {
	var out []string
	for _, s := range grp.GetSnapshots() {
		out = append(out, s.GetSnapshotId())
	}
	return slices.Clip(out)
}

// ruleFile holds the counter on each volume of the writer's pair.
const ruleFile = "rule-counter"

// ruleWriter writes c to the first file, then to the second, c = 1, 2, ...
// (fixed width, buffered, never fsynced) until halted.
type ruleWriter struct {
	n    atomic.Int64
	stop chan struct{}
	done chan error
	once sync.Once
}

func startRule(t *testing.T, first, second string) *ruleWriter {
	w := &ruleWriter{stop: make(chan struct{}), done: make(chan error, 1)}
	var files []*os.File
	for _, dir := range []string{first, second} {
		f, err := os.OpenFile(filepath.Join(dir, ruleFile), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	go func() {
		defer files[0].Close()
		defer files[1].Close()
		for c := int64(1); ; c++ {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			v := []byte(fmt.Sprintf("%020d", c))
			for _, f := range files {
				if _, err := f.WriteAt(v, 0); err != nil {
					w.done <- err
					return
				}
			}
			w.n.Store(c)
			if c%64 == 0 {
				time.Sleep(100 * time.Microsecond) // leave the 2 cores to the driver
			}
		}
	}()
	return w
}

func (w *ruleWriter) halt(t *testing.T) {
	w.once.Do(func() {
		close(w.stop)
		if err := <-w.done; err != nil {
			t.Errorf("rule writer: %v", err)
		}
	})
}

func readRule(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
