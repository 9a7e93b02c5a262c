//go:build e2e

package stories

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The IOPS of the story's two VolumeAttributesClasses: slow, then twice it.
const (
	slowIOPS = 50
	// Writes per measured round: two seconds' worth at the slow limit.
	roundWrites = 2 * slowIOPS
	// GNU dd (oflag=direct): busybox's dd writes through the page cache,
	// whose writeback the kernel charges to no pod. The cluster builds this
	// image with Debian's coreutils (test/e2e/cluster).
	gnuImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
)

// round is one measurement of the pod: roundWrites direct 4 KiB writes,
// ended at end (the log line's timestamp) after took.
type round struct {
	end  time.Time
	took time.Duration
}

func (r round) iops() float64 { return roundWrites / r.took.Seconds() }

// A pod's raw block volume is limited to slowIOPS writes per second by the
// VolumeAttributesClass its claim names; the claim moves to a class with
// twice that, and the rate the pod measures follows, with no restart: the
// resizer calls ControllerModifyVolume, the node re-applies the record's
// limits to the pod's blkio cgroup (--qos-resync).
func TestVolumeAttributesClassChangesIOPSLive(t *testing.T) {
	t.Parallel()
	requireCaps(t, "controller:MODIFY_VOLUME")
	ns := namespace(t)
	slow, fast := vac(t, ns+"-slow", slowIOPS), vac(t, ns+"-fast", 2*slowIOPS)
	pvc := claim(t, ns, "raw", claimOpts{block: true, attributesClass: slow})
	startPodOf(t, gnuImage, ns, "meter", pvc.Name, true, fmt.Sprintf(`
while true; do
  a=$(cut -d" " -f1 /proc/uptime)
  dd if=/dev/zero of=%s bs=4096 count=%d oflag=direct status=none
  b=$(cut -d" " -f1 /proc/uptime)
  echo "round $a $b"
done`, devicePath, roundWrites))
	pod, err := cs.CoreV1().Pods(ns).Get(t.Context(), "meter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := pod.Status.ContainerStatuses[0].State.Running
	if run == nil {
		t.Fatalf("pod meter runs, its container does not: %+v", pod.Status.ContainerStatuses[0].State)
	}
	// On cgroup v1 the limit reaches a container's own cgroup, which kubelet
	// makes after NodePublishVolume, at the node's next pass (docs/io-limits.md: within
	// --qos-resync); rounds begun 2 s after the container started run under it.
	before := rounds(t, ns, "meter", run.StartedAt.Add(2*time.Second), 3)
	if r := meanIOPS(before); r > 1.3*slowIOPS {
		t.Fatalf("limited to %d IOPS, the pod writes %.1f IOPS (rounds %v)", slowIOPS, r, before)
	}

	patch := fmt.Sprintf(`{"spec":{"volumeAttributesClassName":%q}}`, fast)
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Patch(t.Context(), "raw", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("move the claim to %s: %v", fast, err)
	}
	var modified time.Time
	eventually(t, 2*time.Minute, "claim raw modified to "+fast, func() (bool, error) {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "raw", metav1.GetOptions{})
		if err != nil || c.Status.CurrentVolumeAttributesClassName == nil || *c.Status.CurrentVolumeAttributesClassName != fast {
			return false, err
		}
		modified = time.Now()
		return true, nil
	})
	// The node applies a modify within its resync period (1 s) plus a pass:
	// rounds begun two seconds after the claim says modified run under the
	// new limit.
	after := rounds(t, ns, "meter", modified.Add(2*time.Second), 3)
	slowRate, fastRate := meanIOPS(before), meanIOPS(after)
	t.Logf("limit %d IOPS: measured %.1f; limit %d IOPS: measured %.1f", slowIOPS, slowRate, 2*slowIOPS, fastRate)
	if fastRate > 2.6*slowIOPS || fastRate < 1.5*slowRate {
		t.Errorf("after the move to %d IOPS the pod writes %.1f IOPS (before: %.1f); want at least 1.5 times as fast, at most 1.3 times the new limit (rounds %v)",
			2*slowIOPS, fastRate, slowRate, after)
	}
	now, err := cs.CoreV1().Pods(ns).Get(t.Context(), "meter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.UID != pod.UID || now.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the pod was replaced or restarted (uid %s → %s, restarts %d)", pod.UID, now.UID, now.Status.ContainerStatuses[0].RestartCount)
	}
}

// vac creates a VolumeAttributesClass of the driver limiting writes to
// iops, deleted at cleanup.
func vac(t *testing.T, name string, iops int) string {
	t.Helper()
	c := &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: driverName,
		Parameters: map[string]string{"writeIOPS": strconv.Itoa(iops)}}
	if _, err := cs.StorageV1().VolumeAttributesClasses().Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeAttributesClass %s: %v", name, err)
	}
	t.Cleanup(func() {
		// Before the namespace's cleanup (registered earlier): the API server
		// keeps a class in use (vac-protection) until its claim is gone.
		if err := cs.StorageV1().VolumeAttributesClasses().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete VolumeAttributesClass %s: %v", name, err)
		}
	})
	return name
}

// rounds waits until the pod has logged n complete rounds that began after
// since, and returns them.
func rounds(t *testing.T, ns, pod string, since time.Time, n int) []round {
	t.Helper()
	var got []round
	eventually(t, 2*time.Minute, fmt.Sprintf("%d measured rounds of pod %s", n, pod), func() (bool, error) {
		b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &v1.PodLogOptions{Timestamps: true}).DoRaw(t.Context())
		if err != nil {
			return false, err
		}
		got = got[:0]
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			f := strings.Fields(sc.Text()) // <timestamp> round <start> <end>
			if len(f) != 4 || f[1] != "round" {
				continue
			}
			end, err1 := time.Parse(time.RFC3339Nano, f[0])
			a, err2 := strconv.ParseFloat(f[2], 64)
			z, err3 := strconv.ParseFloat(f[3], 64)
			if err1 != nil || err2 != nil || err3 != nil {
				t.Fatalf("pod %s: log line %q is no measurement; log:\n%s", pod, sc.Text(), b)
			}
			r := round{end: end, took: time.Duration(max(z-a, 0) * float64(time.Second))}
			if !r.end.Add(-r.took).After(since) {
				// Before the window: the container's first rounds may run
				// before the limit reaches its cgroup, too fast for the
				// meter's 10 ms clock (start and end equal).
				continue
			}
			if z <= a {
				// A limited round that took no time wrote through a cache,
				// not the device.
				t.Fatalf("pod %s: log line %q is no measurement; log:\n%s", pod, sc.Text(), b)
			}
			got = append(got, r)
		}
		return len(got) >= n, nil
	})
	return got[:n]
}

func meanIOPS(rs []round) float64 {
	var took time.Duration
	for _, r := range rs {
		took += r.took
	}
	return float64(len(rs)*roundWrites) / took.Seconds()
}
