//go:build e2e

package stories

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/filevol/filevol/test/e2e/e2epoll"
)

// The classes and objects test/e2e/manifests/ defines.
const (
	driverName = "filevol.csi.io"
	classExt4  = "filevol"     // the driver's default filesystem
	classXFS   = "filevol-xfs" // online growth works without CAP_SYS_RESOURCE
	snapClass  = "filevol"
	topoKey    = "topology.filevol.csi.io/node"
)

var (
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	poolDir    string
	restartCmd string
	// advertised holds the driver's capabilities as "controller:EXPAND_VOLUME",
	// "node:EXPAND_VOLUME", "plugin:ONLINE"... (the words test/e2e/capprobe prints).
	advertised = map[string]bool{}
	image      = envOr("FILEVOL_E2E_IMAGE", "registry.k8s.io/e2e-test-images/busybox:1.37.0-1")
)

var snapshotGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	kc := os.Getenv("FILEVOL_E2E_KUBECONFIG")
	if kc == "" {
		fmt.Fprintln(os.Stderr, "FILEVOL_E2E_KUBECONFIG is not set: these tests need the e2e cluster; run test/e2e/run.sh (make e2e)")
		os.Exit(1)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs = kubernetes.NewForConfigOrDie(cfg)
	dyn = dynamic.NewForConfigOrDie(cfg)
	poolDir = os.Getenv("FILEVOL_E2E_POOL")
	restartCmd = os.Getenv("FILEVOL_E2E_RESTART")
	if ep := os.Getenv("FILEVOL_E2E_ENDPOINT"); ep != "" {
		if err := probe(ep); err != nil {
			fmt.Fprintln(os.Stderr, "capability probe:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// probe fills advertised from the driver's Identity, Controller and Node
// capabilities, the same way the sidecars decide what to do.
func probe(endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	pc, err := csipb.NewIdentityClient(conn).GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	for _, c := range pc.GetCapabilities() {
		if e := c.GetVolumeExpansion(); e != nil {
			advertised["plugin:"+e.GetType().String()] = true
		}
		if sv := c.GetService(); sv != nil {
			advertised["plugin:"+sv.GetType().String()] = true
		}
	}
	cc, err := csipb.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return err
	}
	for _, c := range cc.GetCapabilities() {
		advertised["controller:"+c.GetRpc().GetType().String()] = true
	}
	nc, err := csipb.NewNodeClient(conn).NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return err
	}
	for _, c := range nc.GetCapabilities() {
		advertised["node:"+c.GetRpc().GetType().String()] = true
	}
	return nil
}

// requireCaps skips the story until the driver advertises every capability:
// features still being built get their story the day they land.
func requireCaps(t *testing.T, words ...string) {
	t.Helper()
	if len(advertised) == 0 {
		t.Skip("FILEVOL_E2E_ENDPOINT not set: capabilities unknown")
	}
	for _, w := range words {
		if !advertised[w] {
			t.Skipf("the driver does not advertise %s", w)
		}
	}
}

// namespace creates a fresh namespace and, at cleanup, deletes it and waits
// until its pods, claims and their volumes are gone: a volume the driver
// cannot delete fails the story that made it.
func namespace(t *testing.T) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "story-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	name := ns.Name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if t.Failed() {
			t.Logf("namespace %s at failure:\n%s", name, describe(ctx, name))
		}
		err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
			return
		}
		err = poll(ctx, time.Second, func() (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			t.Errorf("namespace %s not gone: %v", name, err)
			return
		}
		err = poll(ctx, time.Second, func() (bool, error) {
			pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, pv := range pvs.Items {
				if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == name {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("volumes of namespace %s not deleted: %v\n%s", name, err, pvsOf(ctx, name))
		}
	})
	return name
}

var poll = e2epoll.Until

// eventually fails the test when f is not done within timeout.
func eventually(t *testing.T, timeout time.Duration, what string, f func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := poll(ctx, 500*time.Millisecond, f); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

type claimOpts struct {
	class  string
	size   string
	block  bool
	source *v1.TypedLocalObjectReference // snapshot or claim to copy
	// attributesClass: the VolumeAttributesClass the claim names ("": none).
	attributesClass string
}

// claim creates a ReadWriteOnce PersistentVolumeClaim (filesystem ext4 unless
// told otherwise). With WaitForFirstConsumer it binds when a pod uses it.
func claim(t *testing.T, ns, name string, o claimOpts) *v1.PersistentVolumeClaim {
	t.Helper()
	if o.class == "" {
		o.class = classExt4
	}
	if o.size == "" {
		o.size = "1Gi"
	}
	mode := v1.PersistentVolumeFilesystem
	if o.block {
		mode = v1.PersistentVolumeBlock
	}
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &o.class,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeMode:       &mode,
			Resources: v1.VolumeResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(o.size)}},
			DataSource: o.source,
		},
	}
	if o.attributesClass != "" {
		pvc.Spec.VolumeAttributesClassName = &o.attributesClass
	}
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
	return pvc
}

// Where a pod finds its volume: a directory, or a raw device.
const (
	mountPath  = "/data"
	devicePath = "/dev/filevol"
)

// newPod creates a busybox pod running script with claim at /data (or, for a
// block claim, as the device /dev/filevol). restartPolicy Never: the script's
// output in the log is what the story checks.
func newPod(t *testing.T, ns, name, claimName string, block bool, script string) {
	t.Helper()
	newPodOf(t, image, ns, name, claimName, block, script)
}

// newPodOf is newPod with another image than busybox.
func newPodOf(t *testing.T, img, ns, name, claimName string, block bool, script string) {
	t.Helper()
	grace := int64(1)
	c := v1.Container{
		Name:            "story",
		Image:           img,
		ImagePullPolicy: v1.PullNever,
		Command:         []string{"sh", "-c", "set -e\n" + script},
	}
	if block {
		c.VolumeDevices = []v1.VolumeDevice{{Name: "vol", DevicePath: devicePath}}
	} else {
		c.VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: mountPath}}
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			RestartPolicy:                 v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []v1.Container{c},
			Volumes: []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// startPod creates a pod and waits until it runs.
func startPod(t *testing.T, ns, name, claimName string, block bool, script string) {
	t.Helper()
	startPodOf(t, image, ns, name, claimName, block, script)
}

// startPodOf is startPod with another image than busybox.
func startPodOf(t *testing.T, img, ns, name, claimName string, block bool, script string) {
	t.Helper()
	newPodOf(t, img, ns, name, claimName, block, script)
	eventually(t, 3*time.Minute, "pod "+name+" running", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		switch p.Status.Phase {
		case v1.PodRunning:
			return true, nil
		case v1.PodFailed, v1.PodSucceeded:
			t.Fatalf("pod %s ended (%s) instead of running; log:\n%s", name, p.Status.Phase, podLog(t, ns, name))
		}
		return false, nil
	})
}

// runPod runs script in a new pod to completion, deletes the pod, and
// returns its log. A failing script fails the test.
func runPod(t *testing.T, ns, name, claimName string, block bool, script string) string {
	t.Helper()
	newPod(t, ns, name, claimName, block, script)
	eventually(t, 3*time.Minute, "pod "+name+" done", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		switch p.Status.Phase {
		case v1.PodSucceeded:
			return true, nil
		case v1.PodFailed:
			t.Fatalf("pod %s failed; log:\n%s", name, podLog(t, ns, name))
		}
		return false, nil
	})
	out := podLog(t, ns, name)
	deletePod(t, ns, name)
	return out
}

func podLog(t *testing.T, ns, name string) string {
	t.Helper()
	b, err := cs.CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("log of pod %s: %v", name, err)
	}
	return string(b)
}

// deletePod deletes a pod and waits until it is gone, which is after the
// kubelet unpublished its volumes.
func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	eventually(t, 2*time.Minute, "pod "+name+" gone", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// boundVolume waits until the claim is bound and returns its volume.
func boundVolume(t *testing.T, ns, claimName string) *v1.PersistentVolume {
	t.Helper()
	return boundVolumeOf(t, ns, claimName, driverName)
}

// boundVolumeOf waits until the claim is bound to a volume of driver and
// returns the volume.
func boundVolumeOf(t *testing.T, ns, claimName, driver string) *v1.PersistentVolume {
	t.Helper()
	var pv *v1.PersistentVolume
	eventually(t, 2*time.Minute, "claim "+claimName+" bound", func() (bool, error) {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claimName, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != v1.ClaimBound {
			return false, err
		}
		pv, err = cs.CoreV1().PersistentVolumes().Get(t.Context(), pvc.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, err
	})
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driver {
		t.Fatalf("volume %s is not a %s volume: %+v", pv.Name, driver, pv.Spec.PersistentVolumeSource)
	}
	return pv
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// describe is a short account of a namespace for failure messages: pods,
// claims and events.
func describe(ctx context.Context, ns string) string {
	var b strings.Builder
	if pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "  pod %s: %s on %q %s\n", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Message)
		}
	}
	if pvcs, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range pvcs.Items {
			fmt.Fprintf(&b, "  claim %s: %s volume %q capacity %v\n", c.Name, c.Status.Phase, c.Spec.VolumeName, c.Status.Capacity.Storage())
		}
	}
	if evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "  event %s %s/%s: %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}

func pvsOf(ctx context.Context, ns string) string {
	var b strings.Builder
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, pv := range pvs.Items {
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
			fmt.Fprintf(&b, "  volume %s: %s %s\n", pv.Name, pv.Status.Phase, pv.Status.Message)
		}
	}
	return b.String()
}

// restartDriver runs FILEVOL_E2E_RESTART (test/e2e/deploy.sh restart-driver):
// SIGTERM to filevol, wait for it to exit, start it again.
func restartDriver(t *testing.T) {
	t.Helper()
	if restartCmd == "" {
		t.Skip("FILEVOL_E2E_RESTART not set")
	}
	shell(t, restartCmd)
}

// shell runs a command line of the e2e harness (a restart, chart.sh
// stop-node...) and logs what it printed. Not under the test's context: a
// cleanup runs it too, after that context ended.
func shell(t *testing.T, line string) {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "sh", "-c", line).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	t.Logf("%s:\n%s", line, strings.TrimSpace(string(out)))
}

// snapshotOf snapshots a claim and waits until it is ready. modeChange:
// its content may be restored as a block claim (the snapshot-controller's
// guard against a mode change, lifted as an administrator does).
func snapshotOf(t *testing.T, ns, name, claimName string, modeChange bool) {
	t.Helper()
	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"volumeSnapshotClassName": snapClass,
			"source":                  map[string]any{"persistentVolumeClaimName": claimName},
		},
	}}
	if _, err := dyn.Resource(snapshotGVR).Namespace(ns).Create(t.Context(), snap, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create snapshot %s: %v", name, err)
	}
	var content string
	eventually(t, 2*time.Minute, "snapshot "+name+" ready", func() (bool, error) {
		s, err := dyn.Resource(snapshotGVR).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if msg, _, _ := unstructured.NestedString(s.Object, "status", "error", "message"); msg != "" {
			return false, fmt.Errorf("snapshot error: %s", msg)
		}
		content, _, _ = unstructured.NestedString(s.Object, "status", "boundVolumeSnapshotContentName")
		ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
		return ready, nil
	})
	if !modeChange {
		return
	}
	patch := []byte(`{"metadata":{"annotations":{"snapshot.storage.kubernetes.io/allow-volume-mode-change":"true"}}}`)
	contents := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	if _, err := dyn.Resource(contents).Patch(t.Context(), content, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate %s: %v", content, err)
	}
}
