// Package faults proves that killing filevol loses nothing: a crash at
// any instant must leave a state the retried call completes or cleans
// up. TestKillAndRecover runs the real
// binary as a child process, drives many volumes through the whole
// lifecycle from several goroutines, SIGKILLs the driver at random
// moments and at named step boundaries, restarts it, and retries every
// call the way the sidecars and kubelet do. Between phases it checks that
// nothing leaked (files, loop devices, mounts) and that every
// acknowledged write of a volume not deleted reads back intact, also
// after a simulated reboot. TestRebootMidOperation reboots with a volume
// mid-expansion and one mid-snapshot. TestKillEncryptedStageUnstage
// kills an encrypted volume's stage and unstage at each boundary and
// around each fscrypt ioctl, and checks where its key is left.
//
// The default run is short (make test); `make faults` runs a long one:
//
//	go test -count=1 -v ./test/faults -args -iterations=200
//
// Needs root (loop devices, mounts); skipped otherwise.
package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

var (
	iterationsFlag = flag.Int("iterations", 0, "TestKillAndRecover iterations (default $FAULTS_ITERATIONS, else 8: the short run of make test)")
	workersFlag    = flag.Int("workers", 4, "concurrent callers, each driving its own volumes")
	volumesFlag    = flag.Int("volumes", 2, "volumes per caller per iteration")
	killsFlag      = flag.Int("kills", 4, "kills per phase at most (two phases per iteration)")
	seedFlag       = flag.Uint64("seed", 0, "random seed (0: from the clock); printed, so a run can be repeated")
	binFlag        = flag.String("bin", "", "driver binary to run (default: built from cmd/filevol)")
	kindsFlag      = flag.String("kinds", "", "comma-separated volume kinds to draw from (default: ext4,xfs,btrfs,block)")
	thawFlag       = flag.Bool("thaw-frozen", false, "count filesystems left frozen by an interrupted snapshot, thaw them and go on, instead of failing")
)

// errFrozen marks a volume whose filesystem the driver left frozen.
var errFrozen = errors.New("LEFT FROZEN")

// maxKept bounds the volumes kept across iterations; older ones are
// verified one last time and deleted.
const maxKept = 12

func iterations() int {
	if *iterationsFlag > 0 {
		return *iterationsFlag
	}
	if n, err := strconv.Atoi(os.Getenv("FAULTS_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	return 8
}

// run is one TestKillAndRecover.
type run struct {
	t   *testing.T
	dir string
	p   *proc
	st  *stats
	w   *watcher
	o   *ops
	rng *rand.Rand

	kept      map[string]*volume // volumes not deleted, by ID
	keptOrder []*volume
	reboots   int
	leaks     []string
}

func TestKillAndRecover(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	// Runs before Scratch's cleanup: a filesystem left frozen would stay
	// frozen, and its loop device busy, once unmounted.
	t.Cleanup(func() { thawUnder(dir) })
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -seed=%d)", seed, seed)
	bin := buildDriver(t)
	st := newStats()
	p := newProc(t, bin, dir)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f, err := detectFeatures(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("driver features: %v", f)
	w, err := watchKillPoints(p.pool, p.kubelet, st, p.current)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	r := &run{t: t, dir: dir, p: p, st: st, w: w, o: &ops{p: p, st: st, f: f},
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), kept: map[string]*volume{}}

	start := time.Now()
	n, done := iterations(), 0
	for it := range n {
		r.iteration(it)
		done++
		if len(st.failures) > 0 || len(r.leaks) > 0 {
			t.Errorf("stopping after iteration %d: findings below", it)
			break
		}
	}
	r.final()
	elapsed := time.Since(start)
	r.report(done, elapsed, seed)
}

// iteration drives workers×volumes volumes through the lifecycle under
// kills, keeps one published, checks, reboots, and re-stages and verifies
// the kept one under kills again.
func (r *run) iteration(it int) {
	W, V := *workersFlag, *volumesFlag
	vols := make([][]*volume, W)
	for w := range W {
		for j := range V {
			name := fmt.Sprintf("i%03d-w%d-v%d", it, w, j)
			ks := kinds
			if *kindsFlag != "" {
				ks = strings.Split(*kindsFlag, ",")
			}
			vols[w] = append(vols[w], newVolume(r.dir, name, ks[r.rng.IntN(len(ks))]))
		}
	}
	keep := vols[0][V-1]
	failed := make([]bool, W)
	r.phase(func(w int, rng *rand.Rand) error {
		for _, v := range vols[w] {
			if err := r.lifecycle(v, v == keep, rng); err != nil {
				failed[w] = true
				return errors.Join(err, r.abandon(v))
			}
		}
		return nil
	})
	if failed[0] {
		return // keep's lifecycle failed; reported
	}
	r.kept[keep.id] = keep
	r.keptOrder = append(r.keptOrder, keep)
	r.check(fmt.Sprintf("iteration %d, after the lifecycles", it), map[string]*volume{keep.id: keep})

	// A reboot while keep is published: kubelet stages and publishes it
	// again, and its data must be there. Meanwhile the oldest kept volume
	// is retired.
	r.reboot()
	r.check(fmt.Sprintf("iteration %d, after the reboot", it), nil)
	var retire *volume
	if len(r.keptOrder) > maxKept {
		retire = r.keptOrder[0]
		r.keptOrder = r.keptOrder[1:]
	}
	r.phase(func(w int, rng *rand.Rand) error {
		var v *volume
		switch {
		case w == 0:
			v = keep
		case w == 1 && retire != nil:
			v = retire
		default:
			return nil
		}
		if err := r.restageAndVerify(v, v == retire); err != nil {
			delete(r.kept, v.id)
			return errors.Join(err, r.abandon(v))
		}
		return nil
	})
	if retire != nil {
		delete(r.kept, retire.id)
	}
	r.check(fmt.Sprintf("iteration %d, after re-staging", it), nil)
}

// lifecycle is what a pod's volume goes through: create, stage, publish,
// write, (snapshot, expand), unpublish, unstage, stage and publish again
// and verify, then (unless kept) unpublish, unstage, delete.
func (r *run) lifecycle(v *volume, keep bool, rng *rand.Rand) error {
	o := r.o
	if err := o.create(v, nil); err != nil {
		return err
	}
	r.st.add(func(s *stats) { s.volumes++ })
	if err := o.stageAndPublish(v); err != nil {
		return err
	}
	if err := o.write(v, rng); err != nil {
		return err
	}
	if o.f.snapshot && rng.IntN(2) == 0 {
		if err := o.takeSnapshot(v); err != nil {
			return err
		}
		// A snapshot interrupted by a kill may have left the filesystem
		// frozen; the pod's writes would hang. Thaw it so the run goes on,
		// and report it.
		if frozen := frozenUnder(v.staging); len(frozen) > 0 {
			thawUnder(v.staging)
			r.st.add(func(s *stats) { s.frozen++ })
			if !*thawFlag {
				return fmt.Errorf("%w: %s: filesystem at %v left frozen after CreateSnapshot succeeded (a kill interrupted an earlier attempt)", errFrozen, v, frozen)
			}
		}
	}
	if o.f.expand && rng.IntN(2) == 0 {
		before := fsBytes(v)
		if err := o.expand(v); err != nil {
			return err
		}
		if err := checkSize(v, before); err != nil {
			return err
		}
		if err := o.verify(v); err != nil {
			return err
		}
	}
	if err := o.unpublishAndUnstage(v); err != nil {
		return err
	}
	if err := o.stageAndPublish(v); err != nil {
		return err
	}
	if err := o.verify(v); err != nil {
		return err
	}
	if keep {
		return nil
	}
	if err := o.unpublishAndUnstage(v); err != nil {
		return err
	}
	if err := r.dropSnapshot(v, rng.IntN(3) == 0); err != nil {
		return err
	}
	return o.delete(v)
}

// abandon cleans up after a volume whose lifecycle failed (the failure is
// reported), so that the invariants report only what the driver leaked.
func (r *run) abandon(v *volume) error {
	if v.id == "" {
		return nil
	}
	thawUnder(v.staging)
	err := r.o.unpublishAndUnstage(v)
	if err == nil {
		err = r.dropSnapshot(v, false)
	}
	if err == nil {
		err = r.o.delete(v)
	}
	if err != nil {
		return fmt.Errorf("cleaning up after %s failed too: %w", v, err)
	}
	return nil
}

// restageAndVerify is kubelet after a reboot: stage, publish, and the
// data must be there; then unpublish and unstage (and delete if retire).
func (r *run) restageAndVerify(v *volume, retire bool) error {
	o := r.o
	if err := o.stageAndPublish(v); err != nil {
		return err
	}
	if err := o.verify(v); err != nil {
		return err
	}
	if err := o.unpublishAndUnstage(v); err != nil {
		return err
	}
	if !retire {
		return nil
	}
	if err := r.dropSnapshot(v, true); err != nil {
		return err
	}
	return o.delete(v)
}

// dropSnapshot deletes v's snapshot, after checking a volume restored from
// it when restore is set.
func (r *run) dropSnapshot(v *volume, restore bool) error {
	if v.snap == nil {
		return nil
	}
	if restore {
		if err := r.o.restoreAndVerify(r.dir, v.snap); err != nil {
			return err
		}
	}
	if err := r.o.deleteSnapshot(v.snap); err != nil {
		return err
	}
	v.snap = nil
	return nil
}

// fsBytes is the size of the filesystem published at v.target (0 for block).
func fsBytes(v *volume) int64 {
	if v.block() {
		return 0
	}
	var st unix.Statfs_t
	if err := unix.Statfs(v.target, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * st.Bsize
}

// phase runs fn on every worker while the killer kills and restarts the
// driver; it returns when every worker is done and the driver runs.
func (r *run) phase(fn func(w int, rng *rand.Rand) error) {
	W := *workersFlag
	rngs := make([]*rand.Rand, W)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64()))
	}
	killerRng := rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64()))
	done, killed := make(chan struct{}), make(chan struct{})
	go func() { defer close(killed); r.killer(killerRng, done) }()
	errs := make([]error, W)
	var wg sync.WaitGroup
	for w := range W {
		wg.Go(func() { errs[w] = fn(w, rngs[w]) })
	}
	wg.Wait()
	close(done)
	<-killed
	for _, err := range errs {
		if err != nil {
			r.st.fail("%v", err)
			if errors.Is(err, errCorrupt) {
				r.st.add(func(s *stats) { s.corruptions++ })
			}
		}
	}
	r.ensureRunning()
}

// killer SIGKILLs the driver up to -kills times until done: at a step
// boundary it has killed at least often so far (two in three kills), or
// after a random delay, naming the calls then in flight. After each kill
// it restarts the driver, as kubelet restarts a crashed container.
func (r *run) killer(rng *rand.Rand, done <-chan struct{}) {
	for range *killsFlag {
		point := ""
		if rng.IntN(3) > 0 {
			if pt := pickPoint(r.st, rng.IntN); pt != "" {
				r.w.arm(pt)
				if got, ok := r.w.waitFired(time.Second, done); ok {
					point = got
				}
			}
		}
		if point == "" {
			select {
			case <-time.After(time.Duration(rng.Int64N(int64(250 * time.Millisecond)))):
			case <-done:
				return
			}
			point = "random, during " + r.st.inflightNames()
			r.p.killNow("the killer, " + point)
		}
		r.p.kill()
		r.st.add(func(s *stats) { s.kills++; s.killPoints[point]++ })
		time.Sleep(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
		r.ensureRunning()
		select {
		case <-done:
			return
		default:
		}
	}
}

func (r *run) ensureRunning() {
	for attempt := 1; r.p.current() == nil; attempt++ {
		err := r.p.start()
		if err == nil {
			r.st.add(func(s *stats) { s.restarts++ })
			return
		}
		r.st.fail("restart %d of the driver failed: %v", attempt, err)
		if attempt == 3 {
			// Errorf, not Fatalf: the killer goroutine calls this too, and
			// FailNow belongs to the test's own goroutine. The test's next
			// step sees no driver and fails at once.
			r.t.Errorf("the driver does not start any more: %v", err)
			return
		}
		time.Sleep(time.Second)
	}
}

// reboot leaves what a node reboot leaves (records and images on disk, no
// mounts, no loop devices) and starts the driver again.
func (r *run) reboot() {
	r.p.kill()
	if frozen := frozenUnder(r.dir); len(frozen) > 0 {
		r.st.fail("filesystems left frozen at %v before the reboot", frozen)
	}
	thawUnder(r.dir) // what a reboot does; the detach below fails on a frozen filesystem
	driver.SimulateReboot(r.t, r.dir)
	r.reboots++
	r.ensureRunning()
}

// check runs checkInvariants with the kept volumes and the published ones.
func (r *run) check(when string, published map[string]*volume) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad := checkInvariants(ctx, r.p, r.o.f, state{volumes: r.kept, published: published})
	for _, b := range bad {
		r.t.Errorf("%s: %s", when, b)
	}
	r.leaks = append(r.leaks, bad...)
}

// final reboots, re-stages and verifies every kept volume (under kills),
// deletes them, checks that the pool is empty, and stops the driver with
// SIGTERM as Kubernetes does.
func (r *run) final() {
	r.reboot()
	r.check("before the final verification", nil)
	vols := slices.Clone(r.keptOrder)
	W := *workersFlag
	r.phase(func(w int, rng *rand.Rand) error {
		var errs []error
		for i := w; i < len(vols); i += W {
			if err := r.restageAndVerify(vols[i], true); err != nil {
				errs = append(errs, err, r.abandon(vols[i]))
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		return nil
	})
	clear(r.kept)
	r.keptOrder = nil
	r.check("at the end", nil)
	if err := r.p.stop(); err != nil {
		r.t.Errorf("%v; log:\n%s", err, r.p.logTail())
	}
	if _, err := os.Stat(r.p.sock); !os.IsNotExist(err) {
		r.t.Errorf("socket %s left after SIGTERM (%v)", r.p.sock, err)
	}
}

func (r *run) report(iterations int, elapsed time.Duration, seed uint64) {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, f := range st.failures {
		r.t.Errorf("FINDING: %s", f)
	}
	if len(st.failures) > 0 || len(r.leaks) > 0 {
		r.t.Logf("driver log tail (%s):\n%s", filepath.Base(r.p.logPath), r.p.logTail())
	}
	hit := 0
	for p := range st.points {
		if st.killPoints[p] > 0 {
			hit++
		}
	}
	r.t.Logf(`kill-and-recover report (seed %d)
  iterations:           %d (%d callers × %d volumes each), %s
  volumes:              %d through the lifecycle, %d MiB acknowledged, %d verifications
  kills:                %d SIGKILLs, %d restarts, %d simulated reboots
  step boundaries seen: %d kinds, %d of them killed at
  leaks:                %d
  corruptions:          %d
  failed steps:         %d
  offline resizes:      %d (NodeExpandVolume FAILED_PRECONDITION, completed by re-staging)
  left frozen:          %d (filesystems frozen after a retried CreateSnapshot succeeded; -thaw-frozen=%v)
  kills by point:%s
  boundaries seen (times):%s
  calls:%s
  retries:%s`,
		seed, iterations, *workersFlag, *volumesFlag, elapsed.Round(time.Millisecond),
		st.volumes, st.bytes>>20, st.verified,
		st.kills, st.restarts, r.reboots,
		len(st.points), hit,
		len(r.leaks), st.corruptions, len(st.failures), st.offlineResizes, st.frozen, *thawFlag,
		sortedCounts(st.killPoints), sortedCounts(st.points), sortedCounts(st.calls), sortedCounts(st.retries))
}
