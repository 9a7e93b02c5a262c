//go:build e2e

package multinode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	sharedDriver = "shared.filevol.csi.io"
	// classShared: the shared-pool driver's ext4 class (values-e2e.yaml), on the
	// GlusterFS volume every node mounts (gluster.sh).
	classShared = "filevol-shared"
	// oosTaint: the non-graceful node shutdown taint.
	oosTaint = "node.kubernetes.io/out-of-service"
)

// attachments: the VolumeAttachments of pv (whichever shared driver's), node -> attached.
func attachments(ctx context.Context, pv string) (map[string]bool, error) {
	l, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range l.Items {
		if a.Spec.Source.PersistentVolumeName != nil && *a.Spec.Source.PersistentVolumeName == pv {
			out[a.Spec.NodeName] = a.Status.Attached
		}
	}
	return out, nil
}

// attachedOnlyTo waits until pv's one VolumeAttachment is to node, and attached.
func attachedOnlyTo(t *testing.T, pv, node string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "volume "+pv+" attached to "+node+" alone", func() (bool, error) {
		a, err := attachments(t.Context(), pv)
		return err == nil && len(a) == 1 && a[node], err
	})
}

func claimVolume(t *testing.T, ns, name string) string {
	t.Helper()
	c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || c.Spec.VolumeName == "" {
		t.Fatalf("claim %s not bound: %v", name, err)
	}
	return c.Spec.VolumeName
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	eventually(t, 3*time.Minute, "pod "+name+" gone", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		return err != nil, nil
	})
}

// A shared volume follows its pod. A pod on n3 writes a blob and its checksum; n3 is
// cordoned and the pod deleted (what a drain does to it): the VolumeAttachment to n3 goes
// (ControllerUnpublishVolume), the pod's successor on n2 gets the volume attached there,
// and reads the same blob. On CephFS: on GlusterFS the External Storage suite's shared
// pass (run.sh) moves volumes between nodes the same way.
func TestSharedVolumeMovesByDrain(t *testing.T) { eachBackend(t, sharedVolumeMovesByDrain) }

func sharedVolumeMovesByDrain(t *testing.T, be sharedBackend) {
	if be.name == "gluster" {
		t.Skip("GlusterFS: the suite's shared pass moves its volumes between nodes (run.sh step 5)")
	}
	const a, b = "n3", "n2"
	ns := namespace(t)
	claim(t, ns, "data", be.class, "64Mi")
	pod(t, ns, "app", "data", a,
		`head -c 1048576 /dev/urandom > /data/blob; sha256sum /data/blob > /data/sum; sync; sleep 3600`, v1.RestartPolicyAlways)
	podRunning(t, ns, "app", 3*time.Minute)
	sum := strings.TrimSpace(kubectl(t.Context(), "-n", ns, "exec", "app", "--", "cat", "/data/sum"))
	if !strings.Contains(sum, "/data/blob") {
		t.Fatalf("no checksum written: %q", sum)
	}
	pv := claimVolume(t, ns, "data")
	attachedOnlyTo(t, pv, a, time.Minute)

	t.Logf("kubectl cordon %s: %s", a, strings.TrimSpace(kubectl(t.Context(), "cordon", a)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t.Logf("kubectl uncordon %s: %s", a, strings.TrimSpace(kubectl(ctx, "uncordon", a)))
	})
	deletePod(t, ns, "app")
	eventually(t, 3*time.Minute, "the VolumeAttachment to "+a+" gone", func() (bool, error) {
		at, err := attachments(t.Context(), pv)
		_, on := at[a]
		return err == nil && !on, err
	})
	pod(t, ns, "moved", "data", b, `cat /data/sum; sha256sum /data/blob; sleep 3600`, v1.RestartPolicyAlways)
	p := podRunning(t, ns, "moved", 3*time.Minute)
	if p.Spec.NodeName != b {
		t.Fatalf("pod moved runs on %s, want %s", p.Spec.NodeName, b)
	}
	attachedOnlyTo(t, pv, b, time.Minute)
	got := strings.TrimSpace(kubectl(t.Context(), "-n", ns, "exec", "moved", "--", "sh", "-c", "cat /data/sum; sha256sum /data/blob"))
	lines := strings.Split(got, "\n")
	if len(lines) != 2 || lines[0] != sum || lines[1] != sum {
		t.Fatalf("on %s: %q, want the checksum written on %s (%q) twice", b, got, a, sum)
	}
}

// seqCheck (busybox awk, which reads "00000010" as octal: records are compared as
// strings): the writer's records, one "%08d\n" per acknowledged write, must run 1, 2, 3...
// without a gap or a wrong byte; a torn last record (written, not yet synced when the node
// died) is allowed. It returns the last whole record.
const seqCheck = `awk '{ if (bad == "" && $0 == sprintf("%08d", NR)) last = NR; else if (bad == "") { bad = NR; what = $0 } else more = 1 }
  END { ok = bad == "" || (!more && bad == NR); print last + 0, (ok ? "ok" : "bad line " bad ": " what) }' /data/seq`

// A node dies while its pod writes. The writer on the backend's victim (n3 on GlusterFS,
// n2 on CephFS: both backends at once) appends numbered records and prints each number
// once it is synced (the acknowledgement). The victim is cut off and killed (its veth
// cut first, as a power loss says nothing more; then its kubelet, containerd,
// containers and its shared pools' clients) and tainted out-of-service: the pod is
// deleted, the volume force-detached from it (on CephFS the controller evicts the
// victim's client, given the cluster's credentials) and attached to vm, where every
// acknowledged record is found intact. Then the image is left alone (the
// pod on vm gone, the volume detached), everything is synced while the victim's device is
// still there, and not one byte of the image as the storage holds it (the GlusterFS brick; the
// CephFS through the reader's client) changes. Without the eviction the force-detach
// on CephFS would wait until the MDS gives up on the silent client (about a minute, its
// session_timeout; docs/shared-pools-cephfs.md).
func TestSharedVolumeNodeKilledWhileWriting(t *testing.T) {
	eachBackendAtOnce(t, sharedVolumeNodeKilledWhileWriting)
}

func sharedVolumeNodeKilledWhileWriting(t *testing.T, be sharedBackend) {
	a, b := be.victim, "vm"
	ns := namespace(t)
	claim(t, ns, "log", be.class, "64Mi")
	pod(t, ns, "writer", "log", a,
		`i=0; while true; do i=$((i+1)); printf '%08d\n' $i >> /data/seq; sync; echo "ack $i"; sleep 0.05; done`,
		v1.RestartPolicyNever)
	podRunning(t, ns, "writer", 3*time.Minute)
	pv := claimVolume(t, ns, "log")
	attachedOnlyTo(t, pv, a, time.Minute)
	time.Sleep(3 * time.Second) // some acknowledged writes
	tail := strings.TrimSpace(kubectl(t.Context(), "-n", ns, "logs", "writer", "--tail=1"))
	acked, err := strconv.Atoi(strings.TrimPrefix(tail, "ack "))
	if err != nil || acked < 1 {
		t.Fatalf("writer's last acknowledgement: %q", tail)
	}
	node(t, "kill", a)
	revived := false
	t.Cleanup(func() {
		if !revived {
			out, err := execNode("revive", a)
			t.Logf("cleanup: node.sh revive %s: %v %s", a, err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t.Logf("cleanup: untaint %s: %s", a, strings.TrimSpace(kubectl(ctx, "taint", "node", a, oosTaint+"-")))
	})
	t.Logf("writer acknowledged %d records before %s was killed", acked, a)
	nodeReady(t, a, false, 2*time.Minute)
	t.Logf("taint: %s", strings.TrimSpace(kubectl(t.Context(), "taint", "node", a, oosTaint+"=nodeshutdown:NoExecute")))
	eventually(t, 3*time.Minute, "pod writer deleted (out-of-service)", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(t.Context(), "writer", metav1.GetOptions{})
		return err != nil, nil
	})
	pod(t, ns, "reader", "log", b, `sleep 3600`, v1.RestartPolicyAlways)
	podRunning(t, ns, "reader", 4*time.Minute)
	attachedOnlyTo(t, pv, b, time.Minute)
	if be.evicts && !controllerLogged(t, be, "node fenced", `node="`+a+`"`) {
		t.Errorf("no controller of %s logged that it fenced %s (evicted its client) at the force-detach", be.release, a)
	}
	got := strings.Fields(kubectl(t.Context(), "-n", ns, "exec", "reader", "--", "sh", "-c", seqCheck))
	if len(got) < 2 || got[1] != "ok" {
		t.Fatalf("records on %s: %v, want 1..n in order", b, got)
	}
	n, _ := strconv.Atoi(got[0])
	t.Logf("on %s: records 1..%d intact (%d acknowledged before the kill)", b, n, acked)
	if n < acked {
		t.Fatalf("on %s: %d records, but %d were acknowledged", b, n, acked)
	}

	// The image at rest: no pod uses it, the volume is detached from b. a's loop device
	// and its filesystem on it are still there (the kernel outlives the node here): a sync
	// of every filesystem flushes whatever a still holds towards its dead client, and not
	// one byte of the image in the storage may change.
	deletePod(t, ns, "reader")
	eventually(t, 3*time.Minute, "volume "+pv+" detached everywhere", func() (bool, error) {
		at, err := attachments(t.Context(), pv)
		return err == nil && len(at) == 0, err
	})
	handle := volumeHandle(t, pv)
	img := filepath.Join(be.images, "volumes", handle+".img")
	left := loopsOn(t, handle)
	t.Logf("loop devices still on the image after %s died: %v", a, left)
	t.Cleanup(func() { detachDead(t, handle) })
	before := fileSum(t, img)
	if out, err := runProg(t.Context(), "sync"); err != nil {
		t.Fatalf("sync: %v %s", err, out)
	}
	if after := fileSum(t, img); after != before {
		t.Fatalf("image %s changed after a sync with %s dead: %s -> %s", img, a, before, after)
	}
	t.Logf("image %s unchanged (%s) after a sync with %s's device still attached", img, before[:16], a)
}

// loopsOn: the loop devices whose backing file is the image of volume handle, by the
// name sysfs shows (volume IDs are random: no other image has that name). A dead
// client's file cannot be told by device and inode: the kernel cannot stat it.
func loopsOn(t *testing.T, handle string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasSuffix(strings.TrimSpace(string(b)), "/volumes/"+handle+".img") {
			out = append(out, "/dev/"+strings.Split(f, "/")[3])
		}
	}
	return out
}

// detachDead detaches what the dead node left on the image once it is back (a reboot
// would have taken it; the driver cannot recognise it: see the cluster README), and says
// so: with a filesystem still mounted on it the kernel detaches it at its unmount.
func detachDead(t *testing.T, handle string) {
	for _, d := range loopsOn(t, handle) {
		out, err := runProg(context.Background(), "losetup", "-d", d)
		t.Logf("detached %s, left on the dead node's client: %v %s", d, err, out)
	}
}

func volumeHandle(t *testing.T, pvName string) string {
	t.Helper()
	pv, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pvName, metav1.GetOptions{})
	if err != nil || pv.Spec.CSI == nil {
		t.Fatalf("pv %s: %v", pvName, err)
	}
	return pv.Spec.CSI.VolumeHandle
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the image in the storage: %v", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
