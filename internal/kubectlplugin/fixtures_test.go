package kubectlplugin

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/filevol/filevol/internal/nodeview/api"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// now is the fixed "now" of every test; objects are dated relative to it.
var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func ptr[T any](v T) *T { return &v }

const driver = "filevol.csi.io"

// Builders of the objects a filevol cluster holds.

func csiDriver() *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr(false), StorageCapacity: ptr(true)}}
}

func storageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "filevol"}, Provisioner: driver,
		VolumeBindingMode: ptr(storagev1.VolumeBindingWaitForFirstConsumer)}
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{TopologyKey: name}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func csiNode(name string) *storagev1.CSINode {
	return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: name, TopologyKeys: []string{TopologyKey}}}}}
}

// pv is a bound filevol PV on nodeName for claim ns/claim.
func pv(name, volumeID, nodeName, ns, claim string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{finalizerPVProtection}, CreationTimestamp: ago(24 * time.Hour)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              "filevol",
			VolumeMode:                    ptr(corev1.PersistentVolumeFilesystem),
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: volumeID, FSType: "ext4"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: TopologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
			}}}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
}

func pvc(ns, name, size, volumeName string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: ago(time.Hour),
			Finalizers: []string{finalizerPVCProtection}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr("filevol"), VolumeName: volumeName,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	if volumeName == "" {
		c.Status.Phase = corev1.ClaimPending
	}
	return c
}

func pod(ns, name, nodeName, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: ago(10 * time.Minute)},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
}

// creatingPod is a pod stuck in ContainerCreating.
func creatingPod(ns, name, nodeName, claim string) *corev1.Pod {
	p := pod(ns, name, nodeName, claim)
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}
	return p
}

var eventSeq int

// event is an event about an object, d ago.
func event(kind, ns, name, typ, reason, msg string, d time.Duration) *corev1.Event {
	eventSeq++
	evNS := ns
	if evNS == "" {
		evNS = "default"
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: evNS, Name: fmt.Sprintf("%s.%d", name, eventSeq)},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name},
		Type:           typ, Reason: reason, Message: msg, LastTimestamp: ago(d), Count: 1,
	}
}

// base is a healthy one-node filevol cluster.
func base() []runtime.Object {
	return []runtime.Object{csiDriver(), storageClass(), node("node-1"), csiNode("node-1")}
}

// fakeViewer serves fixed node views.
type fakeViewer map[string]*api.Report

func (f fakeViewer) view(_ context.Context, n string) (*api.Report, error) {
	if r, ok := f[n]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("no driver reachable on %s", n)
}

// run runs a command against a fake cluster holding objs and returns
// its standard output.
func run(t *testing.T, views fakeViewer, args []string, objs ...runtime.Object) string {
	t.Helper()
	env, o := testEnv(objs...)
	if views != nil {
		env.viewer = views
	}
	for i := 1; i < len(args); i++ {
		if args[i] == "-o" {
			o.Output = args[i+1]
			args = append(args[:i], args[i+2:]...)
		}
	}
	out, _ := runIn(t, env, o, args)
	return out
}

// runIn runs a command in env and returns its standard output and error.
func runIn(t *testing.T, env Env, o Options, args []string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env.Out, env.Err = &out, &errOut
	if err := Run(context.Background(), env, o, args); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String()
}

// testEnv is an Env over a fake clientset holding objs, with no driver
// reachable on any node.
func testEnv(objs ...runtime.Object) (Env, Options) {
	env := Env{Clients: fake.NewClientset(objs...), Namespace: "app", Now: now, Out: io.Discard, Err: io.Discard, viewer: fakeViewer{}}
	return env, Options{Driver: driver, DriverSelector: "app.kubernetes.io/name=filevol", Timeout: time.Second, MinAge: time.Minute}
}

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// mustContain checks that out has every line fragment, in order.
func mustContain(t *testing.T, out string, frags ...string) {
	t.Helper()
	rest := out
	for _, f := range frags {
		i := strings.Index(rest, f)
		if i < 0 {
			t.Errorf("output lacks %q (in order):\n%s", f, out)
			return
		}
		rest = rest[i+len(f):]
	}
}
