//go:build e2e

package multinode

import (
	"context"
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
)

// attachments: the shared driver's VolumeAttachments of pv, node -> attached.
func attachments(ctx context.Context, pv string) (map[string]bool, error) {
	l, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range l.Items {
		if a.Spec.Attacher == sharedDriver && a.Spec.Source.PersistentVolumeName != nil && *a.Spec.Source.PersistentVolumeName == pv {
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
// and reads the same blob.
func TestSharedVolumeMovesByDrain(t *testing.T) {
	const a, b = "n3", "n2"
	ns := namespace(t)
	claim(t, ns, "data", classShared, "64Mi")
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
