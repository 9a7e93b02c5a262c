// Package qos proves that a volume's I/O limits act on a running process
// and follow ControllerModifyVolume without a restart: real loop devices,
// real mounts, a real cgroup v1 blkio hierarchy (root only). The test
// makes its own cgroups, laid out as kubelet's cgroupfs driver lays out a
// pod's (…/kubepods/burstable/pod<uid>), under a directory of its own in
// /sys/fs/cgroup/blkio, and removes them; it touches no other cgroup.
//
// Rates are asserted only as coarse bounds (at most twice the limit; a
// raised limit at least twice the old one); the measured figures are
// logged (go test -v) for docs/io-limits.md.
package qos

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

const (
	blkioRoot = "/sys/fs/cgroup/blkio"
	// resync is the node's reconcile period, the default; a change must
	// reach the pod's cgroup within it, with reachTolerance on top for a
	// loaded machine (the pass itself takes milliseconds).
	resync         = time.Second
	reachTolerance = 2 * time.Second
)

// podCgroup makes <blkio>/filevol-qos-test-<pid>/kubepods/burstable/pod<uid>
// with a container's cgroup below it, as kubelet does, and returns the
// hierarchy root to give the driver and the container's dir, where the
// test's I/O runs: v1 throttling is not hierarchical, so a limit must reach
// the container's cgroup itself.
func podCgroup(t *testing.T, uid string) (root, ctr string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(blkioRoot, "blkio.throttle.write_bps_device")); err != nil {
		t.Skipf("no cgroup v1 blkio hierarchy at %s: %v", blkioRoot, err)
	}
	root = filepath.Join(blkioRoot, fmt.Sprintf("filevol-qos-test-%d-%s", os.Getpid(), uid[:8]))
	ctr = filepath.Join(root, "kubepods", "burstable", "pod"+uid, "0a1b2c3d4e5f")
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		t.Fatalf("make test cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Deepest first; our processes have exited, so each is empty.
		for p := ctr; strings.HasPrefix(p, root); p = filepath.Dir(p) {
			if err := os.Remove(p); err != nil {
				t.Errorf("remove test cgroup %s: %v", p, err)
			}
		}
	})
	return root, ctr
}

func newUID(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ddRate runs dd in the pod's cgroup (the child moves itself there before
// exec, so every I/O of dd is charged to it) writing count blocks of bs
// bytes with O_DIRECT to path, and returns bytes and operations per second.
func ddRate(t *testing.T, pod, path string, bs, count int) (bps, iops float64) {
	t.Helper()
	script := `echo $$ > "$1/cgroup.procs" && exec dd if=/dev/zero of="$2" bs="$3" count="$4" oflag=direct conv=notrunc status=none`
	start := time.Now()
	out, err := exec.Command("sh", "-c", script, "sh", pod, path, strconv.Itoa(bs), strconv.Itoa(count)).CombinedOutput()
	el := time.Since(start).Seconds()
	if err != nil {
		t.Fatalf("dd into %s: %v: %s", path, err, out)
	}
	return float64(bs*count) / el, float64(count) / el
}

// waitFor polls the pod's throttle file until it names want for some
// device, and returns how long that took; it fails after resync +
// reachTolerance.
func waitFor(t *testing.T, pod, file string, want int64, since time.Time) time.Duration {
	t.Helper()
	deadline := since.Add(resync + reachTolerance)
	for {
		b, _ := os.ReadFile(filepath.Join(pod, file))
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[1] == strconv.FormatInt(want, 10) {
				found = true
			}
		}
		if want == 0 && strings.TrimSpace(string(b)) == "" {
			found = true
		}
		if found {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of the pod's container is %q, not %d, %v after the change (documented: within %v)", file, b, want, time.Since(since), resync)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLimitsFollowModify(t *testing.T) {
	testutil.RequireRoot(t)
	for _, block := range []bool{true, false} {
		name := map[bool]string{true: "block", false: "mount"}[block]
		t.Run(name, func(t *testing.T) { testLimits(t, block) })
	}
}

func testLimits(t *testing.T, block bool) {
	uid := newUID(t)
	root, pod := podCgroup(t, uid) // pod: its container's cgroup, where the I/O runs
	dir := testutil.Scratch(t, "qos")
	d := driver.StartWith(t, dir, "", func(c *csi.Config) { c.CgroupRoots = []string{root}; c.QoSResync = resync })
	defer d.Stop(t)
	ctx := context.Background()

	const mi = 1 << 20
	vc, target := driver.BlockCap(), filepath.Join(dir, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-qos", uid)
	if !block {
		vc, target = driver.MountCap("ext4"), filepath.Join(dir, "pods", uid, "volumes/kubernetes.io~csi/pv-qos/mount")
	}
	cv, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "qos-" + uid, CapacityRange: &csipb.CapacityRange{RequiredBytes: 128 * mi},
		VolumeCapabilities: []*csipb.VolumeCapability{vc},
		Parameters:         map[string]string{csi.ParamWriteBytesPerSecond: "2Mi"},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := cv.GetVolume().GetVolumeId()
	staging := filepath.Join(dir, "plugins/kubernetes.io/csi/filevol.csi.io/pv-qos/globalmount")
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: vc}); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	defer func() {
		if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Errorf("unpublish: %v", err)
		}
		// The pod's rules went with the publish.
		for _, f := range []string{"read_iops", "write_iops", "read_bps", "write_bps"} {
			if b, _ := os.ReadFile(filepath.Join(pod, "blkio.throttle."+f+"_device")); strings.TrimSpace(string(b)) != "" {
				t.Errorf("after unpublish, the pod's blkio.throttle.%s_device still has %q", f, b)
			}
		}
		if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Errorf("unstage: %v", err)
		}
		if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("delete: %v", err)
		}
	}()
	path := target
	if !block {
		path = filepath.Join(target, "data")
	}
	// At publish, no waiting: the limit of the StorageClass is in place.
	waitFor(t, pod, "blkio.throttle.write_bps_device", 2*mi, time.Now().Add(-resync-reachTolerance+100*time.Millisecond))

	// 1. 2 MiB/s: 4 MiB take about 2 s.
	bps1, _ := ddRate(t, pod, path, 64<<10, 64)
	t.Logf("limit 2 MiB/s: measured %.2f MiB/s", bps1/mi)
	if bps1 > 2*2*mi {
		t.Errorf("limit 2 MiB/s: measured %.2f MiB/s, more than twice the limit", bps1/mi)
	}

	// 2. Raised to 16 MiB/s through ControllerModifyVolume, while the
	// volume stays published: no restart, no republish.
	modify := func(p map[string]string) time.Time {
		at := time.Now()
		if _, err := d.Controller.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: p}); err != nil {
			t.Fatalf("modify %v: %v", p, err)
		}
		return at
	}
	at := modify(map[string]string{csi.ParamWriteBytesPerSecond: "16Mi"})
	took := waitFor(t, pod, "blkio.throttle.write_bps_device", 16*mi, at)
	t.Logf("16 MiB/s reached the pod's cgroup %v after ControllerModifyVolume", took.Round(time.Millisecond))
	bps2, _ := ddRate(t, pod, path, 64<<10, 256)
	t.Logf("limit 16 MiB/s: measured %.2f MiB/s", bps2/mi)
	if bps2 > 2*16*mi {
		t.Errorf("limit 16 MiB/s: measured %.2f MiB/s, more than twice the limit", bps2/mi)
	}
	if bps2 < 2*2*mi {
		t.Errorf("limit raised to 16 MiB/s: measured %.2f MiB/s, not even twice the old limit of 2 MiB/s", bps2/mi)
	}

	// 3. Bytes unlimited ("0"), operations limited: 100 IOPS.
	at = modify(map[string]string{csi.ParamWriteBytesPerSecond: "0", csi.ParamWriteIOPS: "100"})
	took = waitFor(t, pod, "blkio.throttle.write_iops_device", 100, at)
	waitFor(t, pod, "blkio.throttle.write_bps_device", 0, at)
	t.Logf("100 IOPS reached the pod's cgroup %v after ControllerModifyVolume", took.Round(time.Millisecond))
	_, iops := ddRate(t, pod, path, 4096, 200)
	t.Logf("limit 100 IOPS: measured %.1f IOPS", iops)
	if iops > 2*100 {
		t.Errorf("limit 100 IOPS: measured %.1f IOPS, more than twice the limit", iops)
	}
}
