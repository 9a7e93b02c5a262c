//go:build e2e

package stories

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var groupSnapshotGVR = schema.GroupVersionResource{Group: "groupsnapshot.storage.k8s.io", Version: "v1", Resource: "volumegroupsnapshots"}

// groupClass is the chart's VolumeGroupSnapshotClass (values-e2e.yaml).
const groupClass = "filevol"

// dbWriter keeps a rule across two volumes: step i is written to /data
// first, then to /log, each by an atomic rename (no fsync), so at every
// instant log <= data <= log+1. A snapshot of the pair taken at one instant
// keeps the rule; two snapshots taken one after the other need not.
const dbWriter = `
i=0
while true; do
  i=$((i+1))
  echo $i > /data/.n; mv /data/.n /data/n
  echo $i > /log/.n; mv /log/.n /log/n
  [ $((i % 50)) -ne 0 ] || echo $i
done`

// A database's two volumes (data and log, claims labelled app=db) are
// snapshotted as one VolumeGroupSnapshot while it writes; the two members,
// restored to two new claims, are consistent with each other.
func TestGroupSnapshotOfTwoVolumesIsConsistent(t *testing.T) {
	t.Parallel()
	requireCaps(t, "controller:CREATE_DELETE_SNAPSHOT")
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: "groupsnapshot.storage.k8s.io", Version: "v1",
		Resource: "volumegroupsnapshotclasses"}).Get(t.Context(), groupClass, metav1.GetOptions{}); err != nil {
		t.Skipf("no VolumeGroupSnapshotClass %s (the chart makes it with snapshots.snapshotter=controller): %v", groupClass, err)
	}
	ns := namespace(t)
	// Two filesystems of different kinds: each is frozen on its own.
	for name, class := range map[string]string{"data": classXFS, "log": classExt4} {
		claim(t, ns, name, claimOpts{class: class})
		patch := []byte(`{"metadata":{"labels":{"app":"db"}}}`)
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("label claim %s: %v", name, err)
		}
	}
	startTwoVolumePod(t, ns, "db", "data", "log", dbWriter)
	var before int
	eventually(t, 2*time.Minute, "the writer under way", func() (bool, error) {
		n, err := strconv.Atoi(lastLine(podLog(t, ns, "db")))
		before = n
		return err == nil && n >= 100, nil
	})

	vgs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsnapshot.storage.k8s.io/v1",
		"kind":       "VolumeGroupSnapshot",
		"metadata":   map[string]any{"name": "db"},
		"spec": map[string]any{
			"volumeGroupSnapshotClassName": groupClass,
			"source":                       map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "db"}}},
		},
	}}
	t0 := time.Now()
	if _, err := dyn.Resource(groupSnapshotGVR).Namespace(ns).Create(t.Context(), vgs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeGroupSnapshot: %v", err)
	}
	eventually(t, 2*time.Minute, "group snapshot ready", func() (bool, error) {
		s, err := dyn.Resource(groupSnapshotGVR).Namespace(ns).Get(t.Context(), "db", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if msg, _, _ := unstructured.NestedString(s.Object, "status", "error", "message"); msg != "" {
			return false, fmt.Errorf("group snapshot error: %s", msg)
		}
		ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
		return ready, nil
	})
	t.Logf("group snapshot ready %v after its creation", time.Since(t0).Round(time.Millisecond))

	// snapshot-controller made one VolumeSnapshot per claim, owned by the group.
	members := map[string]string{} // claim -> VolumeSnapshot
	list, err := dyn.Resource(snapshotGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list VolumeSnapshots: %v", err)
	}
	for _, s := range list.Items {
		pvc, _, _ := unstructured.NestedString(s.Object, "spec", "source", "persistentVolumeClaimName")
		members[pvc] = s.GetName()
	}
	if len(members) != 2 || members["data"] == "" || members["log"] == "" {
		t.Fatalf("member snapshots by claim %v, want one of data and one of log", members)
	}
	group := "snapshot.storage.k8s.io"
	for _, c := range []string{"data", "log"} {
		claim(t, ns, c+"-restored", claimOpts{class: map[string]string{"data": classXFS, "log": classExt4}[c],
			source: &v1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: members[c]}})
	}
	deletePod(t, ns, "db")
	out := runTwoVolumePod(t, ns, "check", "data-restored", "log-restored", `echo "$(cat /data/n) $(cat /log/n)"`)
	var data, log int
	if _, err := fmt.Sscan(lastLine(out), &data, &log); err != nil {
		t.Fatalf("restored pair: %q: %v", out, err)
	}
	t.Logf("restored pair: data %d, log %d (the writer was at %d before the group snapshot)", data, log, before)
	if data < before || log > data || data > log+1 {
		t.Fatalf("restored pair data=%d log=%d breaks the writer's rule log <= data <= log+1 (or predates step %d)", data, log, before)
	}
}

// twoVolumePod is a pod with claim a at /data and claim b at /log.
func twoVolumePod(t *testing.T, ns, name, a, b, script string) {
	t.Helper()
	grace := int64(1)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "db"}},
		Spec: v1.PodSpec{
			RestartPolicy:                 v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{
				Name: "story", Image: image, ImagePullPolicy: v1.PullNever,
				Command:      []string{"sh", "-c", "set -e\n" + script},
				VolumeMounts: []v1.VolumeMount{{Name: "a", MountPath: "/data"}, {Name: "b", MountPath: "/log"}},
			}},
			Volumes: []v1.Volume{
				{Name: "a", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: a}}},
				{Name: "b", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: b}}},
			},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

func startTwoVolumePod(t *testing.T, ns, name, a, b, script string) {
	t.Helper()
	twoVolumePod(t, ns, name, a, b, script)
	waitPod(t, ns, name, v1.PodRunning)
}

func runTwoVolumePod(t *testing.T, ns, name, a, b, script string) string {
	t.Helper()
	twoVolumePod(t, ns, name, a, b, script)
	waitPod(t, ns, name, v1.PodSucceeded)
	out := podLog(t, ns, name)
	deletePod(t, ns, name)
	return out
}

// waitPod waits until the pod reaches phase; any other end fails the test.
func waitPod(t *testing.T, ns, name string, phase v1.PodPhase) {
	t.Helper()
	eventually(t, 3*time.Minute, "pod "+name+" "+strings.ToLower(string(phase)), func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == phase {
			return true, nil
		}
		if p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded {
			t.Fatalf("pod %s ended %s; log:\n%s", name, p.Status.Phase, podLog(t, ns, name))
		}
		return false, nil
	})
}
