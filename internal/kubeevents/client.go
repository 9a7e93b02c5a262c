// Package kubeevents tells users what filevol knows as Kubernetes Events
// on the PersistentVolume or the Node it concerns (a volume's health turned
// abnormal, an orphaned image quarantined, the pool nearly full), so that
// `kubectl describe pv` and `kubectl describe node` show it, not only the
// driver's log.
//
// It is optional: without --kubeconfig and outside a pod, New returns nil
// and filevol works as before, with no API server. It talks to the API
// server through a REST client for the core/v1 group only — it does not
// import client-go's full clientset, whose scheme registration would cost
// every driver process memory at start-up even when events are off.
// Emitting never blocks or fails a CSI call: events are queued, sent by
// one goroutine, and dropped (with a log line) when the API server is
// unreachable.
//
// It must not import gRPC, the CSI spec, internal/csi or the pool.
package kubeevents

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig returns the API server configuration: the kubeconfig file
// when one is given, else the pod's in-cluster configuration, else nil
// (no API server: events off).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	return cfg, nil
}

// api is the little of the core/v1 API that events need.
type api interface {
	uid(ctx context.Context, resource, name string) (types.UID, error)
	create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
	patchCount(ctx context.Context, namespace, name string, count int32, last metav1.Time) error
}

// restAPI is api over a core/v1 REST client.
type restAPI struct{ c *rest.RESTClient }

func newRESTAPI(cfg *rest.Config, userAgent string) (*restAPI, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: serializer.NewCodecFactory(scheme)}
	c.UserAgent = userAgent
	if c.QPS == 0 {
		c.QPS, c.Burst = 5, 10
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &restAPI{c: rc}, nil
}

func (a *restAPI) uid(ctx context.Context, resource, name string) (types.UID, error) {
	var obj interface {
		runtime.Object
		GetUID() types.UID
	} = &corev1.PersistentVolume{}
	if resource == "nodes" {
		obj = &corev1.Node{}
	}
	if err := a.c.Get().Resource(resource).Name(name).Do(ctx).Into(obj); err != nil {
		return "", err
	}
	return obj.GetUID(), nil
}

func (a *restAPI) create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := a.c.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) patchCount(ctx context.Context, namespace, name string, count int32, last metav1.Time) error {
	ts, err := last.MarshalJSON()
	if err != nil {
		return err
	}
	body := fmt.Appendf(nil, `{"count":%d,"lastTimestamp":%s}`, count, ts)
	return a.c.Patch(types.MergePatchType).Namespace(namespace).Resource("events").Name(name).Body(body).Do(ctx).Error()
}
