//go:build e2e

package stories

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Changed-block tracking as a backup tool sees it: through the chart's
// csi-snapshot-metadata sidecar (TLS, a token for its audience, RBAC), with
// external-snapshot-metadata's own client tools. The verifier copies the
// blocks the service reports from a device restored from the later snapshot
// onto one restored from the earlier (or onto a blank one, for the blocks a
// snapshot holds) and compares the two devices whole: any changed block the
// service left out fails it. A filesystem claim's snapshots are restored as
// block claims to be compared.
func TestChangedBlocksVerifiedByTheUpstreamTools(t *testing.T) {
	t.Parallel()
	requireCaps(t, "plugin:SNAPSHOT_METADATA_SERVICE", "controller:CREATE_DELETE_SNAPSHOT")
	bin := os.Getenv("FILEVOL_E2E_SNAPSHOT_METADATA_BIN")
	if bin == "" {
		t.Skip("FILEVOL_E2E_SNAPSHOT_METADATA_BIN not set: the chart's csi-snapshot-metadata serves this (E2E_INSTALL=helm)")
	}
	if _, err := dyn.Resource(smsGVR).Get(t.Context(), driverName, metav1.GetOptions{}); err != nil {
		t.Fatalf("SnapshotMetadataService %s (the chart makes it where the CRD is served): %v", driverName, err)
	}
	for _, block := range []bool{true, false} {
		t.Run(map[bool]string{true: "block", false: "filesystem"}[block], func(t *testing.T) {
			t.Parallel()
			cbtStory(t, bin, block)
		})
	}
}

var smsGVR = schema.GroupVersionResource{Group: "cbt.storage.k8s.io", Version: "v1beta1", Resource: "snapshotmetadataservices"}

// What the block claim's writers write, in 4 KiB blocks of random bytes:
// before the first snapshot, and between the two (half of it over blocks
// written before).
var (
	firstWrites  = []blockRun{{0, 256}, {2048, 256}, {10240, 16}}
	secondWrites = []blockRun{{128, 16}, {5120, 64}, {10240, 4}}
)

type blockRun struct{ block, count int64 }

func ddScript(runs []blockRun) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "dd if=/dev/urandom of=%s bs=4096 seek=%d count=%d conv=notrunc,fsync 2>/dev/null\n", devicePath, r.block, r.count)
	}
	return b.String()
}

const (
	fsFirst  = "head -c 4194304 /dev/urandom > /data/a; mkdir /data/d; head -c 65536 /dev/urandom > /data/d/b; sync"
	fsSecond = "dd if=/dev/urandom of=/data/a bs=4096 seek=100 count=8 conv=notrunc 2>/dev/null; head -c 1048576 /dev/urandom > /data/c; rm /data/d/b; sync"
)

func cbtStory(t *testing.T, bin string, block bool) {
	ns := namespace(t)
	sa := backupAccount(t, ns)
	claim(t, ns, "vol", claimOpts{size: "64Mi", block: block})
	first, second := fsFirst, fsSecond
	if block {
		first, second = ddScript(firstWrites), ddScript(secondWrites)
	}
	runPod(t, ns, "first", "vol", block, first)
	snapshotOf(t, ns, "s1", "vol", !block)
	runPod(t, ns, "second", "vol", block, second)
	snapshotOf(t, ns, "s2", "vol", !block)

	group := "snapshot.storage.k8s.io"
	from := func(s string) *v1.TypedLocalObjectReference {
		return &v1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: s}
	}
	devs := map[string]*v1.TypedLocalObjectReference{"base": from("s1"), "target": from("s2"), "blank": nil, "blank2": nil}
	for name, src := range devs {
		claim(t, ns, name, claimOpts{size: "64Mi", block: true, source: src})
	}
	paths := holdDevices(t, ns, []string{"base", "target", "blank", "blank2"})
	// tool runs one of the tools as the backup account (the admin's
	// kubeconfig asks for its token): its output, and stderr in err.
	tool := func(name string, args ...string) (string, error) {
		args = append([]string{"-kubeconfig", os.Getenv("FILEVOL_E2E_KUBECONFIG"), "-n", ns,
			"-service-account", sa, "-service-account-namespace", ns}, args...)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return stdout.String(), fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
		}
		return stdout.String(), nil
	}

	// The delta applied to a blank device cannot make it the later
	// snapshot: the verifier can fail, and says so.
	if out, err := tool("snapshot-metadata-verifier", "-s", "s2", "-p", "s1", "-src", paths["target"], "-tgt", paths["blank"]); err == nil ||
		!strings.Contains(err.Error(), "do not match") {
		t.Fatalf("verifier with a wrong base: err %v, output %q; want a mismatch", err, out)
	}
	// The blocks s1 holds make a blank device s1; the delta makes s1 s2.
	if out, err := tool("snapshot-metadata-verifier", "-s", "s1", "-src", paths["base"], "-tgt", paths["blank2"]); err != nil {
		t.Fatalf("verifier, allocated blocks of s1: %v\n%s", err, out)
	}
	if out, err := tool("snapshot-metadata-verifier", "-s", "s2", "-p", "s1", "-src", paths["target"], "-tgt", paths["base"]); err != nil {
		t.Fatalf("verifier, s1 to s2: %v\n%s", err, out)
	}
	out, err := tool("snapshot-metadata-lister", "-s", "s2", "-p", "s1", "-o", "json")
	if err != nil {
		t.Fatalf("lister: %v\n%s", err, out)
	}
	ranges := listed(t, out)
	t.Logf("delta s1..s2: %d ranges, %d bytes", len(ranges), total(ranges))
	if block {
		// Every block written between the snapshots is in the delta; what
		// else is may be reported (a reflink pool's extent granularity),
		// and is logged.
		var written int64
		for _, r := range secondWrites {
			written += r.count * 4096
			if !covered(ranges, r.block*4096, r.count*4096) {
				t.Errorf("blocks %d..%d, written between the snapshots, not in the delta %v", r.block, r.block+r.count, ranges)
			}
		}
		t.Logf("reported %d bytes for %d written: ratio %.2f", total(ranges), written, float64(total(ranges))/float64(written))
	}
}

// backupAccount makes the ServiceAccount a backup tool runs as, allowed
// what the chart's client role allows (a ClusterRoleBinding: the services
// and snapshot contents belong to no namespace).
func backupAccount(t *testing.T, ns string) string {
	t.Helper()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "backup"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount: %v", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cbt-" + ns},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "backup", Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "filevol-snapshot-metadata-client"},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(t.Context(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRoleBinding: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	return "backup"
}

// holdDevices runs a pod holding the block claims, and returns where
// kubelet published each for it on this node (the host is the node).
func holdDevices(t *testing.T, ns string, claims []string) map[string]string {
	t.Helper()
	grace := int64(1)
	c := v1.Container{Name: "hold", Image: image, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "3600"}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hold"}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: &grace}}
	for _, n := range claims {
		c.VolumeDevices = append(c.VolumeDevices, v1.VolumeDevice{Name: n, DevicePath: "/dev/" + n})
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: n, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: n}}})
	}
	pod.Spec.Containers = []v1.Container{c}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod hold: %v", err)
	}
	waitPod(t, ns, "hold", v1.PodRunning)
	p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "hold", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	root := envOr("FILEVOL_E2E_KUBELET_ROOT", "/var/lib/kubelet")
	paths := map[string]string{}
	for _, n := range claims {
		pv := boundVolume(t, ns, n)
		path := filepath.Join(root, "plugins/kubernetes.io/csi/volumeDevices/publish", pv.Name, string(p.UID))
		if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeDevice == 0 {
			t.Fatalf("claim %s: no block device at %s (%v, %v)", n, path, fi, err)
		}
		paths[n] = path
	}
	return paths
}

type listedRange struct {
	Offset int64 `json:"byte_offset"`
	Size   int64 `json:"size_bytes"`
}

// listed parses the lister's JSON: its records' ranges, in order.
func listed(t *testing.T, out string) []listedRange {
	t.Helper()
	var recs []struct {
		Blocks []listedRange `json:"block_metadata"`
	}
	if err := json.NewDecoder(bytes.NewReader([]byte(out))).Decode(&recs); err != nil {
		t.Fatalf("lister output %q: %v", out, err)
	}
	var rs []listedRange
	for _, r := range recs {
		rs = append(rs, r.Blocks...)
	}
	return rs
}

func total(rs []listedRange) (n int64) {
	for _, r := range rs {
		n += r.Size
	}
	return n
}

// covered: [off, off+n) lies within the ranges (sorted, as the service sends them).
func covered(rs []listedRange, off, n int64) bool {
	for _, r := range rs {
		if r.Offset <= off && off < r.Offset+r.Size {
			if off+n <= r.Offset+r.Size {
				return true
			}
			n -= r.Offset + r.Size - off
			off = r.Offset + r.Size
		}
	}
	return n <= 0
}
