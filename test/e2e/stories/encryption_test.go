//go:build e2e

package stories

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An encrypted claim as a tenant holds it: the class names the node-stage
// Secret by the claim's namespace, the tenant's Secret holds the key. What
// the pod writes is nowhere in the pool in clear; the claim's snapshot
// restores with the same Secret; the Secret's key is rotated (new key,
// old one as previousEncryptionKey) and the next pod reads the same bytes;
// afterwards the old key alone is refused and the pod waits, saying which
// Secret field to fix. A claim of the class in another namespace cannot
// use this namespace's Secret.
func TestEncryptedClaimRotatedAndRestored(t *testing.T) {
	t.Parallel()
	requireCaps(t, "controller:CREATE_DELETE_SNAPSHOT")
	if poolDir == "" {
		t.Skip("FILEVOL_E2E_POOL not set")
	}
	ns := namespace(t)
	oldKey, newKey := randomKey(t), randomKey(t)
	setKeys(t, ns, map[string]string{"encryptionKey": oldKey})
	class := encryptedClass(t, ns)

	marker := "filevol-e2e-marker-" + randomKey(t)[:24]
	claim(t, ns, "enc", claimOpts{class: class, size: "64Mi"})
	write := fmt.Sprintf("for i in $(seq 64); do echo %s; done > /data/m; sync; cat /data/m | head -1", marker)
	if got := lastLine(runPod(t, ns, "writer", "enc", false, write)); got != marker {
		t.Fatalf("the writer read back %q, want %q", got, marker)
	}
	pv := boundVolume(t, ns, "enc")
	unstaged(t, pv.Spec.CSI.VolumeHandle)
	files := poolFiles(t, pv.Spec.CSI.VolumeHandle)
	if len(files) == 0 {
		t.Fatalf("no file of volume %s in the pool", pv.Spec.CSI.VolumeHandle)
	}
	for _, f := range files {
		notInFile(t, filepath.Join(poolDir, f), marker)
	}

	// The control: the same bytes through an unencrypted claim are in its
	// image in clear, so the search above could have found them.
	claim(t, ns, "plain", claimOpts{size: "64Mi"})
	runPod(t, ns, "plain-writer", "plain", false, write)
	plain := boundVolume(t, ns, "plain").Spec.CSI.VolumeHandle
	unstaged(t, plain)
	if !anyFileHolds(t, poolFiles(t, plain), marker) {
		t.Fatalf("the unencrypted control volume %s does not hold the marker in its pool files: the search cannot see it", plain)
	}

	snapshotOf(t, ns, "enc-snap", "enc", false)
	group := "snapshot.storage.k8s.io"
	claim(t, ns, "enc-restored", claimOpts{class: class, size: "64Mi",
		source: &v1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: "enc-snap"}})
	read := "head -1 /data/m"
	if got := lastLine(runPod(t, ns, "restored-reader", "enc-restored", false, read)); got != marker {
		t.Fatalf("the restored claim holds %q, want %q", got, marker)
	}

	// Rotation: the stage opens the volume with the previous key and keeps
	// it wrapped under the new one; then the new key alone opens it.
	setKeys(t, ns, map[string]string{"encryptionKey": newKey, "previousEncryptionKey": oldKey})
	if got := lastLine(runPod(t, ns, "rotating-reader", "enc", false, read)); got != marker {
		t.Fatalf("after the rotation the claim holds %q, want %q", got, marker)
	}
	unstaged(t, pv.Spec.CSI.VolumeHandle)
	setKeys(t, ns, map[string]string{"encryptionKey": newKey})
	if got := lastLine(runPod(t, ns, "new-key-reader", "enc", false, read)); got != marker {
		t.Fatalf("with the new key alone the claim holds %q, want %q", got, marker)
	}
	unstaged(t, pv.Spec.CSI.VolumeHandle)

	// The old key alone no longer opens it: the pod waits, and the event
	// names the Secret's field, never its value.
	setKeys(t, ns, map[string]string{"encryptionKey": oldKey})
	newPod(t, ns, "old-key-reader", "enc", false, read)
	msg := failedMount(t, ns, "old-key-reader", "encryptionKey")
	if strings.Contains(msg, oldKey) || strings.Contains(msg, newKey) {
		t.Fatalf("the event shows key material: %s", msg)
	}
	t.Logf("refused: %s", msg)
	if p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "old-key-reader", metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodPending {
		t.Fatalf("the pod with a wrong key: %v, phase %v; want Pending", err, p.Status.Phase)
	}
	deletePod(t, ns, "old-key-reader")

	// Another tenant's claim of the same class gets its own namespace's
	// Secret, never this one's: without one of its own, its pod waits on
	// the missing Secret and nothing is made with this namespace's key.
	other := namespace(t)
	claim(t, other, "enc", claimOpts{class: class, size: "64Mi"})
	newPod(t, other, "no-key", "enc", false, read)
	t.Logf("the other tenant's pod: %s", failedMount(t, other, "no-key", "volume-key", "not found"))
	deletePod(t, other, "no-key")
}

// failedMount waits for a FailedMount event of the pod whose message says
// every one of says, and returns the message.
func failedMount(t *testing.T, ns, pod string, says ...string) string {
	t.Helper()
	var msg string
	eventually(t, 2*time.Minute, "a FailedMount event of pod "+pod+" saying "+strings.Join(says, ", "), func() (bool, error) {
		evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedMount" && containsAll(e.Message, says) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// randomKey is 64 hex characters of fresh randomness: a Secret's key.
func randomKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// setKeys creates or replaces the namespace's Secret "volume-key".
func setKeys(t *testing.T, ns string, data map[string]string) {
	t.Helper()
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "volume-key"}, StringData: data}
	_, err := cs.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{})
	if err == nil {
		return
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Secret volume-key: %v", err)
	}
}

// encryptedClass is a StorageClass of its own for the story, whose
// node-stage Secret is "volume-key" in each claim's namespace.
func encryptedClass(t *testing.T, ns string) string {
	t.Helper()
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "encrypted-" + ns},
		Provisioner: driverName,
		Parameters: map[string]string{
			"encryption":                                     "fscrypt",
			"csi.storage.k8s.io/fstype":                      "ext4",
			"csi.storage.k8s.io/node-stage-secret-name":      "volume-key",
			"csi.storage.k8s.io/node-stage-secret-namespace": "${pvc.namespace}",
		},
		VolumeBindingMode: &mode,
	}
	if _, err := cs.StorageV1().StorageClasses().Create(t.Context(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StorageClass: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})
	return sc.Name
}

// unstaged waits until no node lists the volume in use: kubelet has
// unstaged it (the next pod stages it again, with the Secret as it is then).
func unstaged(t *testing.T, handle string) {
	t.Helper()
	eventually(t, 2*time.Minute, "volume "+handle+" unstaged", func() (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, n := range nodes.Items {
			for _, u := range n.Status.VolumesInUse {
				if strings.HasSuffix(string(u), "^"+handle) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

func anyFileHolds(t *testing.T, files []string, marker string) bool {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(poolDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			return true
		}
	}
	return false
}

// notInFile fails the test if marker is anywhere in the file (read whole:
// the images here are small and sparse).
func notInFile(t *testing.T, path, marker string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(marker)) {
		t.Fatalf("%s holds the marker in clear", path)
	}
	t.Logf("%s (%d bytes): no marker", path, len(b))
}
