package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/testutil"
)

// cryptSecret is the node-stage Secret of every encrypted volume here.
var cryptSecret = map[string]string{keywrap.SecretKey: "a2lsbC1wb2ludHMga2V5IG1hdGVyaWFsLCAzMiBieXRlcyBvciBtb3Jl"}

// cvol is one encrypted volume under test.
type cvol struct {
	name, id, staging, target string
	// marker is what the pod wrote (fsync'd) at the volume's first
	// publish; "" before.
	marker string
	// key is the kernel's identifier of the data key, known once the
	// record holds the wrapped key (keyKnown).
	key      fscrypt.KeyID
	keyKnown bool
	// formatted: a stage completed once (the image holds the filesystem).
	formatted bool
}

// cryptRun is one TestKillEncryptedStageUnstage.
type cryptRun struct {
	t     *testing.T
	dir   string
	p     *proc
	o     *ops
	w     *watcher
	n     int
	kills map[string]int // by the call and point killed at
	// states counts what each kill left before the restart.
	states map[string]int
}

// TestKillEncryptedStageUnstage SIGKILLs the driver, as its own process,
// at the boundaries an encrypted volume's NodeStageVolume and
// NodeUnstageVolume pass: the record that takes the wrapped data key, the
// loop device, mkfs, the mount, the key added to the filesystem's keyring
// and the policy set on <staging>/data (each ioctl held by an openGuard),
// the key removed and the unmount. After each kill, before the restart,
// nothing holds the data key but a filesystem mounted at the staging path
// (a filesystem mounted anywhere else, or a device left attached, must
// read as ciphertext to root: checkKilled), and data/ never holds a file
// in clear. After the restart the retried call completes, the marker the
// pod wrote reads back, and once unstaged the volume is ciphertext again
// and nothing is left (checkUnstaged). make test kills at the named
// boundaries only; make faults (-iterations) at every one.
func TestKillEncryptedStageUnstage(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"mkfs.ext4", "blkid", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	began := time.Now()
	dir := testutil.Scratch(t, "faults")
	p := newProc(t, buildDriver(t), dir)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	st := newStats()
	w, err := watchKillPointsOf(watchSpec{pool: p.pool, barrierDir: p.pool, kubelet: p.kubelet, loopRoots: []string{p.pool}}, st, p.current)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	r := &cryptRun{t: t, dir: dir, p: p, o: &ops{p: p, st: st}, w: w, kills: map[string]int{}, states: map[string]int{}}
	long := groupStride() == 1

	// NodeStageVolume of a new volume: at every boundary (long), each
	// kill followed by guarded retries; and held at its first ioctl on a
	// filesystem fresh from mkfs (both).
	if long {
		for n := 1; r.firstStageRound(func() { w.armNth(n) }); n++ {
			if n > 60 {
				t.Fatal("a first stage with more than 60 boundaries")
			}
		}
	}
	r.heldFirstStageRound()
	// A stage killed at its mount and never retried: kubelet unstages
	// instead (the pod was deleted meanwhile); the key goes with it.
	r.abandonedStageRound()
	// One volume, staged and unstaged round after round.
	v := r.newVolume()
	r.stageOK(v)
	r.unstageOK(v)
	if long {
		for n := 1; r.stageRound(v, func() { w.armNth(n) }); n++ {
		}
		for n := 1; r.unstageRound(v, func() { w.armNth(n) }); n++ {
		}
		for k := 1; r.guardedUnstageRound(v, k); k++ {
		}
	} else {
		r.unstageRound(v, func() { w.arm("mount staging (ext4) unmounted") })
		r.guardedUnstageRound(v, 3) // before the key's removal
		r.guardedUnstageRound(v, 4) // after it
	}
	r.delete(v)

	var kills, states []string
	for k, n := range r.kills {
		kills = append(kills, fmt.Sprintf("%s ×%d", k, n))
	}
	for s, n := range r.states {
		states = append(states, fmt.Sprintf("%s ×%d", s, n))
	}
	sort.Strings(kills)
	sort.Strings(states)
	t.Logf("%d volumes in %s; kills:\n  %s\nwhat they left before the restart:\n  %s", r.n,
		time.Since(began).Round(time.Millisecond), strings.Join(kills, "\n  "), strings.Join(states, "\n  "))
}

func (r *cryptRun) newVolume() *cvol {
	r.n++
	name := fmt.Sprintf("enc-%d", r.n)
	v := &cvol{name: name, staging: filepath.Join(r.dir, "kubelet", "plugins", name, "globalmount"),
		target: filepath.Join(r.dir, "kubelet", "pods", name, "volume")}
	err := r.o.call("CreateVolume", name, func(ctx context.Context) error {
		resp, err := r.p.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, Parameters: map[string]string{"encryption": "fscrypt"},
			VolumeCapabilities: []*csipb.VolumeCapability{sharedCap}, CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 << 20}})
		v.id = resp.GetVolume().GetVolumeId()
		return err
	})
	r.must("create "+name, err)
	return v
}

func (r *cryptRun) must(what string, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v\ndriver log:\n%s", what, err, r.p.logTail())
	}
}

func (r *cryptRun) stageReq(v *cvol) *csipb.NodeStageVolumeRequest {
	return &csipb.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: sharedCap, Secrets: cryptSecret}
}

// stageOnce is one NodeStageVolume attempt.
func (r *cryptRun) stageOnce(v *cvol) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := r.p.node.NodeStageVolume(ctx, r.stageReq(v))
	return err
}

func (r *cryptRun) unstageOnce(v *cvol) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := r.p.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
	return err
}

// stageOK stages v (retried as kubelet does), publishes it, writes the
// marker at its first publish or reads it back, and unpublishes.
func (r *cryptRun) stageOK(v *cvol) {
	r.t.Helper()
	r.must("stage "+v.name, r.o.call("NodeStageVolume", v.name, func(context.Context) error { return r.stageOnce(v) }))
	r.must("publish "+v.name, r.o.call("NodePublishVolume", v.name, func(ctx context.Context) error {
		_, err := r.p.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging,
			TargetPath: v.target, VolumeCapability: sharedCap})
		return err
	}))
	path := filepath.Join(v.target, "marker")
	if v.marker == "" {
		v.marker = fmt.Sprintf("filevol-kill-marker-%s-%d", v.id, time.Now().UnixNano())
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
		if err == nil {
			_, err = f.WriteString(strings.Repeat(v.marker, 64))
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		r.must("write the marker", err)
	} else if got, err := os.ReadFile(path); err != nil || string(got) != strings.Repeat(v.marker, 64) {
		r.t.Fatalf("%s: the marker after the retried stage: %d bytes, %v", v.name, len(got), err)
	}
	r.learnKey(v)
	v.formatted = true
	r.must("unpublish "+v.name, r.o.call("NodeUnpublishVolume", v.name, func(ctx context.Context) error {
		_, err := r.p.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target})
		return err
	}))
}

// unstageOK unstages v (retried) and checks what it leaves.
func (r *cryptRun) unstageOK(v *cvol) {
	r.t.Helper()
	r.must("unstage "+v.name, r.o.call("NodeUnstageVolume", v.name, func(context.Context) error { return r.unstageOnce(v) }))
	for _, bad := range r.checkUnstaged(v) {
		r.t.Errorf("%s after the unstage: %s", v.name, bad)
	}
}

func (r *cryptRun) delete(v *cvol) {
	r.must("delete "+v.name, r.o.call("DeleteVolume", v.name, func(ctx context.Context) error {
		_, err := r.p.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id})
		return err
	}))
}

// killed takes the driver the watcher or guard killed, checks what it
// left, and starts the next one.
func (r *cryptRun) killed(v *cvol, call, point string) {
	r.t.Helper()
	r.p.kill() // reaps it (the watcher sent the SIGKILL)
	r.kills[call+" at "+point]++
	state, bad := r.checkKilled(v)
	r.states[call+": "+state]++
	for _, b := range bad {
		r.t.Errorf("%s killed at %s, before the restart: %s", call, point, b)
	}
	r.must("restart", r.p.start())
}

// firstStageRound is a new volume's first stage killed where arm says;
// a kill that left the staging mount is followed by retries killed
// before and after each fscrypt ioctl, one more each time. It reports
// whether the armed point fired.
func (r *cryptRun) firstStageRound(arm func()) bool {
	v := r.newVolume()
	defer r.delete(v)
	fired := r.stageRound(v, arm)
	return fired
}

// abandonedStageRound kills a first stage after its mount, restarts the
// driver and unstages the volume instead of retrying the stage.
func (r *cryptRun) abandonedStageRound() {
	r.t.Helper()
	v := r.newVolume()
	r.w.arm("mount staging (ext4) mounted")
	err := r.stageOnce(v)
	point, fired := r.w.waitFired(200*time.Millisecond, nil)
	if !fired {
		r.t.Fatalf("a first stage not killed at its mount: %v", err)
	}
	r.killed(v, "NodeStageVolume (then unstaged)", point)
	if id, ok, err := r.keyFromRecord(v); err != nil || !ok {
		r.t.Fatalf("%s: no key in the record after a stage killed at its mount: %v", v.name, err)
	} else {
		v.key, v.keyKnown, v.formatted = id, true, true
	}
	r.unstageOK(v)
	r.delete(v)
}

// heldFirstStageRound kills a new volume's first stage once its
// filesystem is made (the format marker removed), then holds the retried
// stage at its first open on the filesystem, before the key is added:
// the guard cannot mark a mount the driver has not made yet, so the test
// mounts the device itself first and marks the filesystem, which the
// driver's mount then shares. The test's mount goes before the checks.
// The retries that follow are guardedStages', on a mount with no key,
// no data/ and no policy yet.
func (r *cryptRun) heldFirstStageRound() {
	r.t.Helper()
	v := r.newVolume()
	defer r.delete(v)
	r.w.arm("pool volumes/<id>.formatting removed")
	err := r.stageOnce(v)
	point, fired := r.w.waitFired(200*time.Millisecond, nil)
	if !fired {
		r.t.Fatalf("a first stage not killed once formatted: %v", err)
	}
	r.killed(v, "NodeStageVolume", point)
	devs, _, err := r.volumeDevices(v)
	r.must("read the kernel's devices", err)
	if len(devs) == 0 {
		// The kill may land before or after the driver's device went
		// with it: attached here as the driver attaches, so that the
		// retry takes it for its own (imagenode's ensureLoop).
		d, err := loop.Attach(context.Background(), r.image(v), loop.Options{DirectIO: true, BlockSize: 4096, Mark: true,
			Scheduler: "none", Owner: pool.DeviceOwner(nodeID)})
		r.must("attach the image as the driver does", err)
		devs = append(devs, d)
	}
	if len(devs) != 1 {
		r.t.Fatalf("%d loop devices on the image after a kill once formatted", len(devs))
	}
	hold := filepath.Join(r.dir, "hold")
	r.must("make the hold mount point", os.MkdirAll(hold, 0o700))
	if out, err := exec.Command("mount", "-t", "ext4", devs[0].Path, hold).CombinedOutput(); err != nil {
		r.t.Fatalf("mount %s to hold its filesystem: %v: %s", devs[0].Path, err, out)
	}
	unmountHold := func() {
		if out, err := exec.Command("umount", hold).CombinedOutput(); err != nil {
			r.t.Fatalf("umount the hold: %v: %s", err, out)
		}
	}
	g, err := guardFilesystem(hold, v.staging, r.p.current)
	if err != nil {
		unmountHold()
		r.t.Fatal(err)
	}
	g.arm(1)
	err = r.stageOnce(v)
	var o fsOpen
	select {
	case o = <-g.fired:
	case <-time.After(time.Second):
		g.close()
		unmountHold()
		r.t.Fatalf("a retried stage not held at its first open on the filesystem (it did %v): %v", g.events(), err)
	}
	evs := g.events()
	g.close()
	r.p.kill()
	unmountHold()
	r.killed(v, "NodeStageVolume (retried, fresh filesystem)", ioctlPoint(o, evs, "key add", "policy read", "policy set"))
	r.guardedStages(v)
	r.stageOK(v)
	r.unstageOK(v)
}

// stageRound stages v (unstaged) killed where arm says, then retries,
// verifies, and unstages. It reports whether the point fired.
func (r *cryptRun) stageRound(v *cvol, arm func()) bool {
	r.t.Helper()
	arm()
	err := r.stageOnce(v)
	point, fired := r.w.waitFired(200*time.Millisecond, nil)
	if !fired {
		r.must("an unkilled stage", err)
	} else {
		r.killed(v, "NodeStageVolume", point)
		r.guardedStages(v)
	}
	r.stageOK(v)
	r.unstageOK(v)
	return fired
}

// guardedStages retries a stage that finds its mount, killing the k-th
// attempt at the driver's k-th open or close on the mount (k = 1, 2, ...
// in a long run; the opens before the key's addition and before the
// policy's setting in the short one), until an attempt completes.
func (r *cryptRun) guardedStages(v *cvol) {
	r.t.Helper()
	ks := []int{1, 5}
	if groupStride() == 1 {
		ks = nil
		for k := 1; k <= 12; k++ {
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		if !r.stagingMounted(v) {
			return
		}
		o, evs, fired, err := r.guarded(v, k, func() error { return r.stageOnce(v) })
		if !fired {
			r.must(fmt.Sprintf("a stage not killed (the driver did %v on its mount)", evs), err)
			return
		}
		r.killed(v, "NodeStageVolume (retried)", ioctlPoint(o, evs, "key add", "policy read", "policy set"))
	}
}

// guarded runs call with the driver's kth open or close on v's staging
// mount armed, and returns that event (when it fired) and all it saw.
func (r *cryptRun) guarded(v *cvol, k int, call func() error) (fsOpen, []fsOpen, bool, error) {
	g, err := guardMount(v.staging, r.p.current)
	r.must("guard the staging mount", err)
	defer g.close()
	g.arm(k)
	err = call()
	// A close is told after the fact: the driver may have answered the
	// call before the guard killed it, so the guard is given a moment.
	select {
	case o := <-g.fired:
		return o, g.events(), true, err
	case <-time.After(200 * time.Millisecond):
	}
	g.disarm()
	select {
	case o := <-g.fired:
		return o, g.events(), true, err
	default:
		return fsOpen{}, g.events(), false, err
	}
}

// ioctlPoint names an open or close by the ioctl it brackets: ioctls are
// the ioctls the call makes, in order, each on a file of its own (hence
// one open and one close each).
func ioctlPoint(o fsOpen, evs []fsOpen, ioctls ...string) string {
	opens := 0
	for _, e := range evs[:o.n] {
		if !e.close {
			opens++
		}
	}
	what := "open " + o.rel
	if opens >= 1 && opens <= len(ioctls) {
		what = ioctls[opens-1]
	}
	if o.close {
		return "after " + what + " (" + o.String() + ")"
	}
	return "before " + what + " (" + o.String() + ")"
}

// unstageRound unstages v (staged first) killed where arm says, retries
// it, and stages it again to read the marker back.
func (r *cryptRun) unstageRound(v *cvol, arm func()) bool {
	r.t.Helper()
	r.stageOK(v)
	arm()
	err := r.unstageOnce(v)
	point, fired := r.w.waitFired(200*time.Millisecond, nil)
	if !fired {
		r.must("an unkilled unstage", err)
		r.checkAfterUnstage(v)
		return false
	}
	r.killed(v, "NodeUnstageVolume", point)
	r.unstageOK(v)
	r.stageOK(v)
	r.unstageOK(v)
	return true
}

func (r *cryptRun) checkAfterUnstage(v *cvol) {
	for _, bad := range r.checkUnstaged(v) {
		r.t.Errorf("%s after the unstage: %s", v.name, bad)
	}
}

// guardedUnstageRound unstages v killed at the driver's k-th open or close
// on the staging mount: reading data/'s policy (which names the key),
// then removing the key through the mount's root.
func (r *cryptRun) guardedUnstageRound(v *cvol, k int) bool {
	r.t.Helper()
	r.stageOK(v)
	o, evs, fired, err := r.guarded(v, k, func() error { return r.unstageOnce(v) })
	if !fired {
		r.must(fmt.Sprintf("an unstage not killed (the driver did %v on its mount)", evs), err)
		r.checkAfterUnstage(v)
		return false
	}
	r.killed(v, "NodeUnstageVolume", ioctlPoint(o, evs, "policy read", "key remove"))
	r.unstageOK(v)
	r.stageOK(v)
	r.unstageOK(v)
	return true
}
