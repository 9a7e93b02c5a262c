package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volview"
)

func TestNodeStageFormatsEmptyDevice(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capMount("", rw))

	devs := e.devices(id)
	if len(devs) != 1 || devs[0].ReadOnly || !devs[0].DirectIO {
		t.Fatalf("devices %+v, want one read-write direct-I/O device", devs)
	}
	if sig, size := e.k.Signature(e.image(id)); sig != "ext4" || size != 64<<20 {
		t.Errorf("image carries %q of %d bytes, want ext4 of the whole device", sig, size)
	}
	m, ok := e.top(staging)
	if !ok || m.Source != devs[0].Path || m.FSType != "ext4" {
		t.Fatalf("staging mount %+v (%v), want ext4 of %s", m, ok, devs[0].Path)
	}
	for _, o := range []string{"rw", "nosuid", "nodev"} {
		if !slices.Contains(m.Options, o) {
			t.Errorf("staging mount options %v lack %s", m.Options, o)
		}
	}
	if n := e.k.Calls("format"); n != 1 {
		t.Errorf("%d formats, want 1", n)
	}
}

// filevol formats only a device with no signature at all: anything found
// is data, even a filesystem of another type or no filesystem at all.
func TestNodeStageNeverFormatsOverSignature(t *testing.T) {
	cases := []struct {
		name, sig, fsType string
		want              codes.Code
	}{
		{"foreign signature", "LVM2_member", "", codes.FailedPrecondition},
		{"other filesystem requested", "xfs", "ext4", codes.FailedPrecondition},
		{"partition table", "dos", "ext4", codes.FailedPrecondition},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.committed("a", "ext4", 512<<20)
			e.k.SetSignature(e.image(id), c.sig, 512<<20)
			err := e.stage(id, e.staging("a"), capMount(c.fsType, rw))
			wantCode(t, "stage", err, c.want)
			if n := e.k.Calls("format"); n != 0 {
				t.Errorf("formatted %d times over %s", n, c.sig)
			}
			if sig, _ := e.k.Signature(e.image(id)); sig != c.sig {
				t.Errorf("signature now %q", sig)
			}
			if devs := e.devices(id); len(devs) != 0 {
				t.Errorf("failed stage left %v attached", devs)
			}
		})
	}
}

func TestNodeStageKeepsExistingFilesystem(t *testing.T) {
	e := newNodeEnv(t)
	id := e.committed("a", "xfs", 512<<20)
	e.k.SetSignature(e.image(id), "xfs", 512<<20)
	// No fs type in the request: the filesystem found is mounted as it is.
	e.mustStage(id, e.staging("a"), capMount("", rw))
	if n := e.k.Calls("format"); n != 0 {
		t.Errorf("%d formats of a device holding xfs", n)
	}
	m, _ := e.top(e.staging("a"))
	if m.FSType != "xfs" || !slices.Contains(m.SuperOptions, "nouuid") {
		t.Errorf("staging mount %+v, want xfs with nouuid", m)
	}
}

func TestNodeStageIdempotent(t *testing.T) {
	for _, c := range []struct {
		name string
		cap  *csipb.VolumeCapability
	}{{"mount", capMount("ext4", rw)}, {"block", capBlock(rw)}} {
		t.Run(c.name, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.volume("a", "ext4", 64<<20)
			e.mustStage(id, e.staging("a"), c.cap)
			before := e.k.Log()
			e.mustStage(id, e.staging("a"), c.cap)
			for _, op := range []string{"attach", "format", "mount", "bind"} {
				if n := e.k.Calls(op); n > 1 {
					t.Errorf("%d %s calls after a second stage; log %v", n, op, e.k.Log()[len(before):])
				}
			}
			if devs := e.devices(id); len(devs) != 1 {
				t.Errorf("devices %v, want one", devs)
			}
		})
	}
}

func TestNodeStageStagingOccupied(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := e.k.MountAt(staging, "tmpfs", "tmpfs"); err != nil {
		t.Fatal(err)
	}
	err := e.stage(id, staging, capMount("ext4", rw))
	wantCode(t, "stage over a tmpfs", err, codes.AlreadyExists)
	if !strings.Contains(err.Error(), "tmpfs") {
		t.Errorf("message %q does not name what is mounted there", err)
	}
	if devs := e.devices(id); len(devs) != 0 {
		t.Errorf("failed stage left %v attached", devs)
	}
	if n := e.k.Calls("format"); n != 0 {
		t.Errorf("formatted although the stage was refused")
	}
	// Another volume staged there is just as foreign.
	other := e.volume("b", "ext4", 64<<20)
	if err := e.unstageTmpfs(staging); err != nil {
		t.Fatal(err)
	}
	e.mustStage(other, staging, capMount("ext4", rw))
	wantCode(t, "stage over another volume", e.stage(id, staging, capMount("ext4", rw)), codes.AlreadyExists)
}

func (e *nodeEnv) unstageTmpfs(path string) error { return e.k.UnmountAll(path) }

func TestNodeStageReadOnly(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	// Never formatted: a read-only stage cannot make the filesystem.
	wantCode(t, "read-only stage of a blank volume", e.stage(id, e.staging("a"), capMount("", ro)), codes.FailedPrecondition)
	if devs := e.devices(id); len(devs) != 0 {
		t.Fatalf("failed stage left %v attached", devs)
	}
	e.k.SetSignature(e.image(id), "ext4", 64<<20)
	e.mustStage(id, e.staging("a"), capMount("", ro))
	devs := e.devices(id)
	if len(devs) != 1 || !devs[0].ReadOnly {
		t.Fatalf("devices %+v, want one read-only", devs)
	}
	if m, _ := e.top(e.staging("a")); !slices.Contains(m.Options, "ro") {
		t.Errorf("staging mount options %v, want ro", m.Options)
	}
	if e.k.Calls("format")+e.k.Calls("grow") != 0 {
		t.Errorf("read-only stage wrote: %v", e.k.Log())
	}
}

func TestNodeStageBlock(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	staging := e.staging("a")
	e.mustStage(id, staging, capBlock(rw))
	devs := e.devices(id)
	if len(devs) != 1 {
		t.Fatalf("devices %v", devs)
	}
	m, ok := e.top(volview.StagedDevicePath(staging))
	if !ok || m.FSType != "devtmpfs" || m.Root != "/"+filepath.Base(devs[0].Path) {
		t.Fatalf("staged device bind %+v (%v), want devtmpfs of %s", m, ok, devs[0].Path)
	}
	if e.k.Calls("format")+e.k.Calls("mount")+e.k.Calls("probe") != 0 {
		t.Errorf("block stage touched a filesystem: %v", e.k.Log())
	}
}

// A stage that fails after attaching leaves no device behind, whichever
// step failed.
func TestNodeStageFailureDetaches(t *testing.T) {
	boom := errors.New("injected")
	cases := []struct {
		op  string
		cap *csipb.VolumeCapability
	}{
		{"Probe", capMount("ext4", rw)},
		{"Format", capMount("ext4", rw)},
		{"Mount", capMount("ext4", rw)},
		{"Lookup", capMount("ext4", rw)},
		{"Lookup", capBlock(rw)},
		{"Bind", capBlock(rw)},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.volume("a", "ext4", 64<<20)
			e.k.Fail(c.op, boom)
			err := e.stage(id, e.staging("a"), c.cap)
			if !errors.Is(err, boom) {
				t.Fatalf("stage: %v, want the injected error", err)
			}
			e.k.Fail(c.op, nil)
			if devs := e.devices(id); len(devs) != 0 {
				t.Fatalf("failed stage left %v attached; log %v", devs, e.k.Log())
			}
			if e.k.Calls("attach") != 1 || e.k.Calls("detach") != 1 {
				t.Errorf("log %v, want one attach and one detach", e.k.Log())
			}
			if rec := e.inUse(id); len(rec) != 0 {
				t.Errorf("in-use records %+v left by a failed stage", rec)
			}
			// The retry works from scratch.
			e.mustStage(id, e.staging("a"), c.cap)
		})
	}
}

// A device attached by an earlier call is not this call's to detach.
func TestNodeStageFailureKeepsEarlierDevice(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	if err := e.unstageTmpfs(e.staging("a")); err != nil { // unmounted behind our back
		t.Fatal(err)
	}
	e.k.Fail("Mount", unix.EIO)
	if err := e.stage(id, e.staging("a"), capMount("ext4", rw)); !errors.Is(err, unix.EIO) {
		t.Fatalf("stage: %v", err)
	}
	if devs := e.devices(id); len(devs) != 1 {
		t.Errorf("devices %v: the device staged before was detached", devs)
	}
}

// A device whose detach the kernel deferred (another process holds it
// open) is found whether or not this node still has a record of the
// volume: unrecorded, through the lock every device of this driver holds
// on its image (loop.Options.Mark); recorded, by the look-up, which also
// finds a device of a driver that did not mark its devices.
func TestNodeStageWaitsForDetachingDevice(t *testing.T) {
	for _, c := range []struct {
		name     string
		mark     bool
		recorded bool
	}{{"marked, unrecorded", true, false}, {"unmarked, recorded", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.committed("a", "ext4", 64<<20)
			if c.recorded {
				if err := inuse.New(e.pool.Dir()).Put(inuse.Entry{VolumeID: id, Node: "n1", StagingPath: e.staging("a")}); err != nil {
					t.Fatal(err)
				}
			}
			d, err := e.k.Attach(context.Background(), e.image(id), loop.Options{Mark: c.mark})
			if err != nil {
				t.Fatal(err)
			}
			e.k.HoldOpen(d.Path)
			if err := e.k.Detach(d.Path); !errors.Is(err, loop.ErrBusy) {
				t.Fatalf("detach of a held device: %v", err)
			}
			err = e.stage(id, e.staging("a"), capMount("ext4", rw))
			wantCode(t, "stage while the device detaches", err, codes.Aborted)
			if !strings.Contains(err.Error(), "open by 1 process(es)") {
				t.Errorf("the refusal does not say what holds the device: %v", err)
			}
			if devs := e.devices(id); len(devs) != 1 {
				t.Errorf("devices %v: a second device on the image", devs)
			}
			e.k.Release(d.Path)
			e.mustStage(id, e.staging("a"), capMount("ext4", rw))
		})
	}
}

// A first stage of a volume on this node (no record of it yet, its image
// unlocked) attaches without the look-up that reads every loop device of
// the node; a second stage (a retry, kubelet after a restart) looks up the
// device and reuses it.
func TestNodeStageFirstStageSkipsTheLoopScan(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	if n := e.k.Calls("find"); n != 0 {
		t.Errorf("first stage: %d loop look-ups, want 0 (the image was unlocked and unrecorded)", n)
	}
	if n := e.k.Calls("locked"); n != 1 {
		t.Errorf("first stage: %d lock probes, want 1", n)
	}
	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	if n := e.k.Calls("find"); n != 1 {
		t.Errorf("second stage: %d loop look-ups in all, want 1", n)
	}
	if devs := e.devices(id); len(devs) != 1 || e.k.Calls("attach") != 1 {
		t.Errorf("devices %v after %d attaches, want one device, attached once", devs, e.k.Calls("attach"))
	}
}

// A filesystem smaller than its device (restored, cloned or expanded while
// unstaged) grows at stage: ext4 offline before the mount, xfs after it.
func TestNodeStageGrowsFilesystem(t *testing.T) {
	for _, c := range []struct {
		fsType, op string
		size       int64
	}{{"ext4", "grow-offline", 64 << 20}, {"xfs", "grow", 512 << 20}} {
		t.Run(c.fsType, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.committed("a", c.fsType, c.size)
			e.k.SetSignature(e.image(id), c.fsType, c.size/2)
			e.mustStage(id, e.staging("a"), capMount(c.fsType, rw))
			if n := e.k.Calls(c.op); n != 1 {
				t.Errorf("%d %s calls; log %v", n, c.op, e.k.Log())
			}
			if _, size := e.k.Signature(e.image(id)); size != c.size {
				t.Errorf("filesystem of %d bytes after stage, want %d", size, c.size)
			}
		})
	}
}

func TestNodeStageRequestChecks(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	good := capMount("ext4", rw)
	calls := len(e.k.Log()) // the driver's start-up reads the kernel
	cases := []struct {
		name    string
		id, dir string
		cap     *csipb.VolumeCapability
		want    codes.Code
	}{
		{"no ID", "", e.staging("a"), good, codes.InvalidArgument},
		{"no staging path", id, "", good, codes.InvalidArgument},
		{"relative staging path", id, "globalmount", good, codes.InvalidArgument},
		{"staging path outside kubelet", id, "/etc/x", good, codes.InvalidArgument},
		{"no capability", id, e.staging("a"), nil, codes.InvalidArgument},
		{"multi-node capability", id, e.staging("a"), capMount("ext4", csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), codes.InvalidArgument},
		{"malformed ID", "../../etc", e.staging("a"), good, codes.NotFound},
		{"unknown volume", "fv-" + strings.Repeat("0", 32), e.staging("a"), good, codes.NotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantCode(t, c.name, e.stage(c.id, c.dir, c.cap), c.want)
		})
	}
	unlock, err := e.node.locks.tryLock(id)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "stage during another call", e.stage(id, e.staging("a"), good), codes.Aborted)
	unlock()
	if log := e.k.Log(); len(log) != calls {
		t.Errorf("refused requests reached the kernel: %v", log[calls:])
	}
}

// TestNodeUnstageWaitsOutATransientlyBusyDevice: a device that is busy for
// a moment after its filesystem is unmounted (a container being created
// holds a copy of the mount) is detached by the same unstage; one busy for
// good still fails, naming it busy.
func TestNodeUnstageWaitsOutATransientlyBusyDevice(t *testing.T) {
	e := newNodeEnv(t)
	id := e.volume("a", "ext4", 64<<20)
	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	e.k.FailOnce("DetachFile", fmt.Errorf("detach: %w", loop.ErrBusy))
	if err := e.unstage(id, e.staging("a")); err != nil {
		t.Fatalf("unstage with a device busy once: %v", err)
	}
	if devs := e.devices(id); len(devs) != 0 {
		t.Fatalf("devices after unstage: %v", devs)
	}
	if n := e.k.Calls("detach-file"); n != 2 {
		t.Errorf("%d DetachFile calls, want 2 (busy, then detached)", n)
	}

	e.mustStage(id, e.staging("a"), capMount("ext4", rw))
	e.k.Fail("DetachFile", fmt.Errorf("detach: %w", loop.ErrBusy))
	if err := e.unstage(id, e.staging("a")); status.Code(toStatus(err)) != codes.FailedPrecondition || !errors.Is(err, loop.ErrBusy) {
		t.Fatalf("unstage with a device busy for good = %v, want FAILED_PRECONDITION saying busy", err)
	}
}

// At the kernel's limits a stage fails with RESOURCE_EXHAUSTED (the CO
// backs off, and the scheduler may place the pod elsewhere) and leaves
// nothing behind: no free loop device (LOOP_CTL_GET_FREE fails), or the
// mount namespace at fs.mount-max (mount(2) ENOSPC, which
// internal/hostos/mount reports as ErrTableFull; its test hits the real
// limit).
func TestNodeStageAtKernelLimitsIsResourceExhausted(t *testing.T) {
	cases := []struct {
		op  string
		err error
		cap *csipb.VolumeCapability
	}{
		{"Attach", fmt.Errorf("loop: attach: %w: LOOP_CTL_GET_FREE: %w", loop.ErrNoDevice, unix.ENOMEM), capMount("ext4", rw)},
		{"Mount", fmt.Errorf("mount: %w: %w", mount.ErrTableFull, unix.ENOSPC), capMount("ext4", rw)},
		{"Bind", fmt.Errorf("bind: %w: %w", mount.ErrTableFull, unix.ENOSPC), capBlock(rw)},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			e := newNodeEnv(t)
			id := e.volume("a", "ext4", 64<<20)
			e.k.Fail(c.op, c.err)
			wantCode(t, "stage at the limit", e.stage(id, e.staging("a"), c.cap), codes.ResourceExhausted)
			e.k.Fail(c.op, nil)
			if devs := e.devices(id); len(devs) != 0 {
				t.Fatalf("failed stage left %v attached; log %v", devs, e.k.Log())
			}
			if rec := e.inUse(id); len(rec) != 0 {
				t.Errorf("in-use records %+v left by a failed stage", rec)
			}
			e.mustStage(id, e.staging("a"), c.cap)
		})
	}
}
