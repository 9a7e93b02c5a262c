package kubeevents

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Kinds of object an event can be about.
const (
	KindNode = "Node"
	KindPV   = "PersistentVolume"
)

// Event types, as Kubernetes knows them.
const (
	Normal  = corev1.EventTypeNormal
	Warning = corev1.EventTypeWarning
)

// Event is one thing to tell about an object. The PV or Node must exist:
// its UID is looked up so `kubectl describe` finds the event.
type Event struct {
	Kind, Name            string
	Type, Reason, Message string
}

// Config identifies who reports.
type Config struct {
	// Driver is the CSI driver name (the events' reportingController).
	Driver string
	// Node is this node (source host, reportingInstance).
	Node string
	// Version goes into the User-Agent.
	Version string
}

const (
	queueSize = 256
	// repeatAfter: the same event (object, reason, message) is sent at most
	// this often; repeats in between raise the count sent next time, like
	// client-go's event correlator.
	repeatAfter = 5 * time.Minute
	// forgetAfter: an event not repeated for this long is created anew
	// (the API server's event TTL is one hour).
	forgetAfter = 50 * time.Minute
	callTimeout = 10 * time.Second
)

// Recorder sends events. Emit never blocks; Run does the sending.
type Recorder struct {
	cfg   Config
	api   api
	queue chan Event
	now   func() time.Time

	mu   sync.Mutex
	seen map[Event]*sent
	uids map[string]string // kind/name -> UID
}

// sent is what was last sent for one Event.
type sent struct {
	namespace, name string
	count, pending  int32
	last            time.Time
}

// New returns a Recorder for the API server of restCfg, or nil when
// restCfg is nil (no API server: events off). Call Run to start sending.
func New(restCfg *rest.Config, cfg Config) (*Recorder, error) {
	if restCfg == nil {
		return nil, nil
	}
	a, err := newRESTAPI(restCfg, "filevol/"+cfg.Version+" (events)")
	if err != nil {
		return nil, err
	}
	return newRecorder(a, cfg), nil
}

func newRecorder(a api, cfg Config) *Recorder {
	return &Recorder{cfg: cfg, api: a, queue: make(chan Event, queueSize), now: time.Now,
		seen: map[Event]*sent{}, uids: map[string]string{}}
}

// Emit queues ev. A nil Recorder (events off) ignores it; a full queue
// drops it with a log line.
func (r *Recorder) Emit(ev Event) {
	if r == nil {
		return
	}
	klog.V(2).InfoS("event", "kind", ev.Kind, "name", ev.Name, "type", ev.Type, "reason", ev.Reason, "message", ev.Message)
	select {
	case r.queue <- ev:
	default:
		klog.InfoS("event queue full; dropping event", "kind", ev.Kind, "name", ev.Name, "reason", ev.Reason)
	}
}

// Run sends queued events until ctx is done.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.queue:
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			if err := r.send(cctx, ev); err != nil {
				klog.ErrorS(err, "could not send event", "kind", ev.Kind, "name", ev.Name, "reason", ev.Reason)
			}
			cancel()
		}
	}
}

// send creates the event, or raises the count of the one sent for the
// same thing earlier.
func (r *Recorder) send(ctx context.Context, ev Event) error {
	now := r.now()
	r.mu.Lock()
	s := r.seen[ev]
	if s != nil && now.Sub(s.last) > forgetAfter {
		s = nil
	}
	if s != nil && now.Sub(s.last) < repeatAfter {
		s.pending++
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	if s != nil {
		count := s.count + s.pending + 1
		err := r.api.patchCount(ctx, s.namespace, s.name, count, metav1.NewTime(now))
		if err == nil {
			r.mu.Lock()
			s.count, s.pending, s.last = count, 0, now
			r.mu.Unlock()
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		// Expired on the server: create it again.
	}
	uid, err := r.uid(ctx, ev.Kind, ev.Name)
	if err != nil {
		return err
	}
	obj := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: ev.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: ev.Kind, Name: ev.Name, UID: types.UID(uid), APIVersion: "v1"},
		Reason:         ev.Reason, Message: truncate(ev.Message), Type: ev.Type,
		Source:         corev1.EventSource{Component: "filevol", Host: r.cfg.Node},
		FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now), Count: 1,
		ReportingController: r.cfg.Driver, ReportingInstance: r.cfg.Node,
	}
	out, err := r.api.create(ctx, obj)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.seen[ev] = &sent{namespace: out.Namespace, name: out.Name, count: 1, last: now}
	r.mu.Unlock()
	return nil
}

// uid looks the object up once (cluster-scoped objects' events live in
// the default namespace and are found by kubectl describe through the UID).
func (r *Recorder) uid(ctx context.Context, kind, name string) (string, error) {
	key := kind + "/" + name
	r.mu.Lock()
	u, ok := r.uids[key]
	r.mu.Unlock()
	if ok {
		return u, nil
	}
	resource := "persistentvolumes"
	if kind == KindNode {
		resource = "nodes"
	}
	uid, err := r.api.uid(ctx, resource, name)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.uids[key] = string(uid)
	r.mu.Unlock()
	return string(uid), nil
}

// truncate keeps a message within the API server's 1 KiB limit for
// event messages.
func truncate(s string) string {
	const limit = 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}
