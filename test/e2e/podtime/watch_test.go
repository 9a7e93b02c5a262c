//go:build e2e

package podtime

import (
	"context"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// The moments of one sample, on the test's clock, as the watch first saw
// each (zero: not seen yet).
type trace struct {
	Class    string
	Claim    string
	Created  time.Time // just before the claim's Create call
	Selected time.Time // the claim carries the scheduler's selected-node annotation
	Bound    time.Time // the claim is Bound: provisioned, and the PV bound to it
	OnNode   time.Time // the pod has its nodeName: the scheduler's binding is done
	Running  time.Time // the pod is Running
	// local-path only: its helper pod for this claim, created and Succeeded.
	HelperCreated, HelperDone time.Time
	uid                       string
}

const selectedNodeAnn = "volume.kubernetes.io/selected-node"

// tracker watches the claims and pods of one namespace, and the helper pods
// of local-path's, and stamps the traces it knows.
type tracker struct {
	mu      sync.Mutex
	byClaim map[string]*trace // claim name (= pod name) -> trace
	byUID   map[string]*trace // claim UID -> trace (helper pods name the PV, pvc-<uid>)
}

func newTracker() *tracker {
	return &tracker{byClaim: map[string]*trace{}, byUID: map[string]*trace{}}
}

func (k *tracker) add(t *trace) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.byClaim[t.Claim] = t
}

// stamp sets *at to now unless it is already set.
func stamp(at *time.Time, now time.Time) {
	if at.IsZero() {
		*at = now
	}
}

func (k *tracker) claim(c *v1.PersistentVolumeClaim, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := k.byClaim[c.Name]
	if t == nil {
		return
	}
	if t.uid == "" {
		t.uid = string(c.UID)
		k.byUID[t.uid] = t
	}
	if c.Annotations[selectedNodeAnn] != "" {
		stamp(&t.Selected, now)
	}
	if c.Status.Phase == v1.ClaimBound {
		stamp(&t.Bound, now)
	}
}

func (k *tracker) pod(p *v1.Pod, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := k.byClaim[p.Name]
	if t == nil {
		return
	}
	if p.Spec.NodeName != "" {
		stamp(&t.OnNode, now)
	}
	if p.Status.Phase == v1.PodRunning {
		stamp(&t.Running, now)
	}
}

// helper: local-path names its helper pods helper-pod-create-pvc-<claim uid>
// (cut to 63 characters, which a UID fits in).
func (k *tracker) helper(p *v1.Pod, now time.Time) {
	uid, ok := strings.CutPrefix(p.Name, "helper-pod-create-pvc-")
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	t := k.byUID[uid]
	if t == nil {
		return
	}
	stamp(&t.HelperCreated, now)
	if p.Status.Phase == v1.PodSucceeded {
		stamp(&t.HelperDone, now)
	}
}

// run watches until ctx ends. ready is closed once every watch is open, so
// that nothing created afterwards goes unseen. A watch the API server ends
// is opened again: its first events then replay every object as it is, so
// no transition is lost (only stamped later than it happened).
func (k *tracker) run(ctx context.Context, cs kubernetes.Interface, ns, helperNS string, ready chan<- struct{}) error {
	type stream struct {
		open   func() (watch.Interface, error)
		handle func(ev watch.Event, now time.Time)
	}
	streams := []stream{
		{func() (watch.Interface, error) {
			return cs.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, metav1.ListOptions{})
		},
			func(ev watch.Event, now time.Time) {
				if c, ok := ev.Object.(*v1.PersistentVolumeClaim); ok {
					k.claim(c, now)
				}
			}},
		{func() (watch.Interface, error) { return cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{}) },
			func(ev watch.Event, now time.Time) {
				if p, ok := ev.Object.(*v1.Pod); ok {
					k.pod(p, now)
				}
			}},
	}
	if helperNS != "" {
		streams = append(streams, stream{func() (watch.Interface, error) { return cs.CoreV1().Pods(helperNS).Watch(ctx, metav1.ListOptions{}) },
			func(ev watch.Event, now time.Time) {
				if p, ok := ev.Object.(*v1.Pod); ok {
					k.helper(p, now)
				}
			}})
	}
	ws := make([]watch.Interface, len(streams))
	for i, s := range streams {
		w, err := s.open()
		if err != nil {
			return err
		}
		ws[i] = w
	}
	close(ready)
	errs := make(chan error, len(streams))
	for i, s := range streams {
		go func() {
			w := ws[i]
			for {
				for ev := range w.ResultChan() {
					s.handle(ev, time.Now())
				}
				w.Stop()
				if ctx.Err() != nil {
					errs <- nil
					return
				}
				var err error
				if w, err = s.open(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range streams {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func (k *tracker) setUID(t *trace, uid string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t.uid = uid
	k.byUID[uid] = t
}

func (k *tracker) allRunning(ts []*trace) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range ts {
		if t.Running.IsZero() {
			return false
		}
	}
	return true
}

// pending names the samples not running yet, and how far each got.
func (k *tracker) pending(ts []*trace) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, t := range ts {
		if !t.Running.IsZero() {
			continue
		}
		at := "created"
		for _, s := range []struct {
			name string
			at   time.Time
		}{{"selected", t.Selected}, {"bound", t.Bound}, {"on node", t.OnNode}} {
			if !s.at.IsZero() {
				at = s.name
			}
		}
		out = append(out, t.Claim+" ("+at+")")
	}
	if len(out) > 10 {
		out = append(out[:10], "...")
	}
	return strings.Join(out, ", ")
}
