//go:build e2e

package podtime

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cleanup deletes the pods and claims of class ("": all of them), and waits until their volumes are gone too, so that no
// teardown runs under the next measurement and a volume a driver fails to
// delete fails the test.
func (r *run) cleanup(t *testing.T, class string) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	sel := "app=podtime"
	if class != "" {
		sel += ",class=" + class
	}
	zero := int64(0)
	lo := metav1.ListOptions{LabelSelector: sel}
	if err := r.cs.CoreV1().Pods(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, lo); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete pods: %v", err)
	}
	if err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, lo); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete claims: %v", err)
	}
	start := time.Now()
	for {
		left, err := r.left(ctx, class, lo)
		if err == nil && left == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Errorf("cleanup of %q: %d objects left after %s (last error %v)", sel, left, time.Since(start).Round(time.Second), err)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("cleanup of %q: %s", sel, time.Since(start).Round(100*time.Millisecond))
}

// deleteNamespace ends the run: cleanup has emptied it.
func (r *run) deleteNamespace(t *testing.T) {
	if err := r.cs.CoreV1().Namespaces().Delete(context.Background(), r.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace: %v", err)
	}
}

// left counts the pods, claims and volumes of the selection still there.
func (r *run) left(ctx context.Context, class string, lo metav1.ListOptions) (int, error) {
	pods, err := r.cs.CoreV1().Pods(r.ns).List(ctx, lo)
	if err != nil {
		return -1, err
	}
	claims, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).List(ctx, lo)
	if err != nil {
		return -1, err
	}
	pvs, err := r.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return -1, err
	}
	n := len(pods.Items) + len(claims.Items)
	for _, pv := range pvs.Items {
		if ours(&pv, r.ns, class) {
			n++
		}
	}
	return n, nil
}

func ours(pv *v1.PersistentVolume, ns, class string) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.Namespace == ns && (class == "" || pv.Spec.StorageClassName == class)
}
