//go:build e2e

package doctor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/filevol/filevol/internal/kubectlplugin"
)

var (
	cs         kubernetes.Interface
	kubeconfig = envOr("FILEVOL_E2E_KUBECONFIG", os.Getenv("KUBECONFIG"))
	poolDir    = os.Getenv("FILEVOL_E2E_POOL")
	driverURL  = envOr("FILEVOL_E2E_DRIVER_URL", "http://127.0.0.1:9808")
	image      = envOr("FILEVOL_E2E_IMAGE", "registry.k8s.io/e2e-test-images/busybox:1.37.0-1")
)

const class = "filevol"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	if kubeconfig == "" {
		fmt.Println("FILEVOL_E2E_KUBECONFIG (or KUBECONFIG) not set: no cluster to test against")
		os.Exit(0)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if cs, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// doctor runs `kubectl filevol doctor` and returns its output.
func doctor(t *testing.T) string {
	t.Helper()
	var out, errOut bytes.Buffer
	code := kubectlplugin.Main([]string{"doctor", "--kubeconfig", kubeconfig, "--driver-url", driverURL, "--min-age", "10s"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("kubectl filevol doctor exited %d: %s", code, errOut.String())
	}
	return out.String()
}

// doctorSays waits until doctor's output has every fragment and returns it.
func doctorSays(t *testing.T, timeout time.Duration, frags ...string) string {
	t.Helper()
	var out string
	eventually(t, timeout, fmt.Sprintf("doctor naming %q", frags), func() (bool, error) {
		out = doctor(t)
		for _, f := range frags {
			if !strings.Contains(out, f) {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("kubectl filevol doctor:\n%s", out)
	return out
}

// namespace makes a fresh namespace, deleted (and waited for) at cleanup.
func namespace(t *testing.T) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "doctor-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_ = cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		_ = poll(ctx, func() (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
	return ns.Name
}

func poll(ctx context.Context, f func() (bool, error)) error {
	for {
		done, err := f()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := poll(ctx, f); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

func claim(t *testing.T, ns, name, size string) {
	t.Helper()
	c := class
	_, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &c,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
}

// newPod starts a busybox pod running script with the claim at /data.
func newPod(t *testing.T, ns, name, claimName, script string) {
	t.Helper()
	grace := int64(1)
	_, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script}, VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "vol", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// writeOnce runs a pod that writes to the claim, waits for it to finish,
// deletes it and returns the claim's PV (bound by then).
func writeOnce(t *testing.T, ns, claimName string) *corev1.PersistentVolume {
	t.Helper()
	newPod(t, ns, "writer", claimName, "echo hello > /data/hello && sync")
	eventually(t, 3*time.Minute, "writer done", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "writer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("writer pod failed")
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
	deletePod(t, ns, "writer")
	c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pv
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	_ = cs.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
	eventually(t, 2*time.Minute, "pod "+name+" gone", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// dropFinalizers clears an object's finalizers (cleanup of held objects).
func dropFinalizers(ctx context.Context, patch func(context.Context, []byte) error) {
	_ = patch(ctx, []byte(`{"metadata":{"finalizers":null}}`))
}

var mergePatch = types.MergePatchType
