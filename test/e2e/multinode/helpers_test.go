//go:build e2e

package multinode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/filevol/filevol/test/e2e/e2epoll"
)

const (
	driverName = "filevol.csi.io"
	classThin  = "filevol"
	// classThick reserves the whole size at creation (values.yaml): capacity drops by it.
	classThick = "filevol-thick"
	topoKey    = "topology.filevol.csi.io/node"
	hostKey    = "kubernetes.io/hostname"
)

var (
	cs         kubernetes.Interface
	kubeconfig string
	image      string
	nodeSh     string
	kubectlFV  string
)

func TestMain(m *testing.M) {
	kubeconfig = os.Getenv("FILEVOL_E2E_KUBECONFIG")
	if kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "FILEVOL_E2E_KUBECONFIG is not set: these tests need the multi-node e2e cluster; run test/e2e/multinode/run.sh (make e2e-multinode)")
		os.Exit(1)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs = kubernetes.NewForConfigOrDie(cfg)
	image = os.Getenv("FILEVOL_E2E_IMAGE")
	nodeSh = os.Getenv("FILEVOL_E2E_NODE_SH")
	kubectlFV = os.Getenv("FILEVOL_E2E_KUBECTL_FILEVOL")
	os.Exit(m.Run())
}

// namespace creates a fresh namespace; at cleanup it deletes it and waits until its
// claims' volumes are gone (a volume the driver cannot delete fails the story).
func namespace(t *testing.T) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "mn-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	name := ns.Name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if t.Failed() {
			t.Logf("namespace %s at failure:\n%s", name, kubectl(ctx, "get", "pods,pvc,events", "-n", name, "-o", "wide"))
		}
		pvs := map[string]bool{}
		if l, err := cs.CoreV1().PersistentVolumeClaims(name).List(ctx, metav1.ListOptions{}); err == nil {
			for _, c := range l.Items {
				if c.Spec.VolumeName != "" {
					pvs[c.Spec.VolumeName] = true
				}
			}
		}
		if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
			return
		}
		err := poll(ctx, time.Second, func() (bool, error) {
			for pv := range pvs {
				if _, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{}); err == nil {
					return false, nil
				} else if !apierrors.IsNotFound(err) {
					return false, err
				}
			}
			_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s and its %d volumes not gone: %v", name, len(pvs), err)
		}
	})
	return name
}

var poll = e2epoll.Until

func eventually(t *testing.T, timeout time.Duration, what string, f func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now()
	if err := poll(ctx, time.Second, f); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
	t.Logf("%s after %.1fs", what, time.Since(start).Seconds())
}

func claim(t *testing.T, ns, name, class, size string) {
	t.Helper()
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
}

// pod starts a pod that mounts claimName at /data and runs script; node, when set, pins it.
func pod(t *testing.T, ns, name, claimName, node, script string, restart v1.RestartPolicy) {
	t.Helper()
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []v1.Container{{
				Name: "c", Image: image, ImagePullPolicy: v1.PullNever,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: "/data"}},
			}},
			Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}},
		},
	}
	if node != "" {
		p.Spec.NodeSelector = map[string]string{hostKey: node}
	}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

func ptr[T any](v T) *T { return &v }

func podRunning(t *testing.T, ns, name string, timeout time.Duration) *v1.Pod {
	t.Helper()
	var got *v1.Pod
	eventually(t, timeout, "pod "+name+" Running", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = p
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

// pvNode is the node a node-local PV is pinned to by its node affinity.
func pvNode(t *testing.T, ns, claimName string) (string, *v1.PersistentVolume) {
	t.Helper()
	c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claimName, metav1.GetOptions{})
	if err != nil || c.Spec.VolumeName == "" {
		t.Fatalf("claim %s not bound: %v", claimName, err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pv of %s: %v", claimName, err)
	}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		t.Fatalf("pv %s has no node affinity", pv.Name)
	}
	var nodes []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == topoKey {
				nodes = append(nodes, e.Values...)
			}
		}
	}
	if len(nodes) != 1 {
		t.Fatalf("pv %s: node affinity names %v, want exactly one node", pv.Name, nodes)
	}
	return nodes[0], pv
}

// capacities: the driver's CSIStorageCapacity per node for class.
func capacities(ctx context.Context, class string) (map[string]int64, error) {
	l, err := cs.StorageV1().CSIStorageCapacities("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, c := range l.Items {
		if c.StorageClassName != class || c.NodeTopology == nil || c.Capacity == nil {
			continue
		}
		out[c.NodeTopology.MatchLabels[topoKey]] = c.Capacity.Value()
	}
	return out, nil
}

// kubectl runs the cluster's kubectl (FILEVOL_E2E_KUBECTL) and returns its output.
func kubectl(ctx context.Context, args ...string) string {
	cmd := exec.CommandContext(ctx, os.Getenv("FILEVOL_E2E_KUBECTL"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Run(); err != nil {
		return fmt.Sprintf("%s\n(%v)", b.String(), err)
	}
	return b.String()
}

// doctor runs `kubectl filevol doctor` (with args) and returns what it printed.
func doctor(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlFV, append([]string{"--kubeconfig", kubeconfig, "doctor", "--min-age=5s"}, args...)...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	t.Logf("kubectl filevol doctor (%v):\n%s", err, b.String())
	return b.String()
}

// node runs node.sh (kill, revive) for a node.
func node(t *testing.T, verb, name string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), nodeSh, verb, name).CombinedOutput()
	t.Logf("node.sh %s %s: %s", verb, name, strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("node.sh %s %s: %v", verb, name, err)
	}
}

func nodeReady(t *testing.T, name string, want bool, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("node %s Ready=%v", name, want), func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return (c.Status == v1.ConditionTrue) == want, nil
			}
		}
		return false, nil
	})
}

func mib(n int64) string { return fmt.Sprintf("%dMi", n>>20) }

// runProg runs a program and returns its combined output.
func runProg(ctx context.Context, prog string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, prog, args...).CombinedOutput()
	return string(out), err
}

// nodeTainted waits for the node to carry the taint key with effect.
func nodeTainted(t *testing.T, name, key string, effect v1.TaintEffect, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("node %s tainted %s:%s", name, key, effect), func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == key && taint.Effect == effect {
				return true, nil
			}
		}
		return false, nil
	})
}
