package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// How the plugin reaches the driver's /debug/volumes on a node.
//
// The driver serves it on --http-endpoint, which the chart binds to
// 127.0.0.1 when the pod shares the host's network: nothing off the node
// can reach it directly. A port-forward to the driver pod (the API server
// → kubelet → the pod's network namespace, which for a hostNetwork pod is
// the host's, where 127.0.0.1 is the driver) works in every real cluster
// and needs only the pods/portforward permission that cluster admins have.
// The API server's pod proxy (--via=proxy) works when the endpoint is
// bound to the pod IP, never for a loopback bind. A driver run as a host
// process (the project's e2e cluster) has no pod: --driver-url names its
// endpoint, with {node} replaced by the node name.
const (
	viaPortForward = "port-forward"
	viaProxy       = "proxy"
	viaNone        = "none"
)

// viewer fetches one node's view.
type viewer interface {
	view(ctx context.Context, node string) (*api.Report, error)
}

// fetchViews fills c.views and c.viewErrs for the nodes, in parallel.
func fetchViews(ctx context.Context, c *cluster, v viewer, nodes []string, timeout time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r, err := v.view(cctx, n)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				c.viewErrs[n] = err
				return
			}
			c.views[n] = r
		})
	}
	wg.Wait()
}

// urlViewer GETs a URL template ({node} → node name).
type urlViewer struct {
	template string
	client   *http.Client
}

func (u urlViewer) view(ctx context.Context, node string) (*api.Report, error) {
	if !strings.Contains(u.template, "{node}") {
		// One driver: it serves only its own node.
		r, err := getReport(ctx, u.client, u.template)
		if err == nil && r.Node != node {
			return nil, fmt.Errorf("%s serves node %s, not %s", u.template, r.Node, node)
		}
		return r, err
	}
	return getReport(ctx, u.client, strings.ReplaceAll(u.template, "{node}", node))
}

func getReport(ctx context.Context, client *http.Client, base string) (*api.Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+api.Path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s %s", req.URL, resp.Status, oneLine(string(b)))
	}
	return decodeReport(resp.Body)
}

func decodeReport(r io.Reader) (*api.Report, error) {
	var rep api.Report
	if err := json.NewDecoder(io.LimitReader(r, 64<<20)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("decode %s: %w", api.Path, err)
	}
	return &rep, nil
}

// podViewer reaches the driver pod on the node, by port-forward or proxy.
type podViewer struct {
	cfg         *rest.Config
	cs          kubernetes.Interface
	pods        []corev1.Pod
	defaultPort int
	via         string
}

func (p podViewer) view(ctx context.Context, node string) (*api.Report, error) {
	pod, port, err := p.driverPod(node)
	if err != nil {
		return nil, err
	}
	if p.via == viaProxy {
		b, err := p.cs.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, strconv.Itoa(port), api.Path, nil).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("pod proxy to %s/%s:%d: %w", pod.Namespace, pod.Name, port, err)
		}
		return decodeReport(strings.NewReader(string(b)))
	}
	return p.portForward(ctx, pod, port)
}

// driverPod picks the running driver pod on node that serves an HTTP
// endpoint, and its port (from the filevol container's --http-endpoint).
// Node-service pods (component node, --mode node or all) come first: a
// controller pod on the same node does not see the node's mounts.
func (p podViewer) driverPod(node string) (*corev1.Pod, int, error) {
	var fallback *corev1.Pod
	for _, wantNode := range []bool{true, false} {
		for i := range p.pods {
			pod := &p.pods[i]
			if pod.Spec.NodeName != node || pod.Status.Phase != corev1.PodRunning || nodeService(pod) != wantNode {
				continue
			}
			if fallback == nil {
				fallback = pod
			}
			if port, ok := podHTTPPort(pod); ok {
				return pod, port, nil
			}
		}
	}
	if fallback != nil && p.defaultPort > 0 {
		return fallback, p.defaultPort, nil
	}
	return nil, 0, fmt.Errorf("no running driver pod on node %s (a driver run on the host? pass --driver-url)", node)
}

// nodeService reports a pod that serves the CSI node service.
func nodeService(pod *corev1.Pod) bool {
	if c := pod.Labels["app.kubernetes.io/component"]; c != "" {
		return c == "node"
	}
	for _, c := range pod.Spec.Containers {
		for _, a := range c.Args {
			if a == "--mode=controller" {
				return false
			}
		}
	}
	return true
}

// podHTTPPort is the port of --http-endpoint of the container named
// filevol, else of the first container that has one.
func podHTTPPort(pod *corev1.Pod) (int, bool) {
	for _, c := range pod.Spec.Containers {
		if c.Name == "filevol" {
			if port, ok := httpPort(c.Args); ok {
				return port, true
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		if port, ok := httpPort(c.Args); ok {
			return port, true
		}
	}
	return 0, false
}

// httpPort finds the port of --http-endpoint in a container's arguments.
func httpPort(args []string) (int, bool) {
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--http-endpoint=")
		if !ok && a == "--http-endpoint" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if !ok {
			continue
		}
		if _, port, err := net.SplitHostPort(v); err == nil {
			if n, err := strconv.Atoi(port); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

// portForward opens a tunnel to the pod's port on a random local port,
// GETs the view through it and closes it.
func (p podViewer) portForward(ctx context.Context, pod *corev1.Pod, port int) (*api.Report, error) {
	url := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(p.cfg)
	if err != nil {
		return nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	if ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, p.cfg); err == nil {
		// As kubectl does: websockets first, SPDY when the server refuses.
		dialer = portforward.NewFallbackDialerForStreaming(ws, dialer, func(err error) bool {
			return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
		})
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{})
	var errOut strings.Builder
	fw, err := portforward.NewOnAddressesForStreamingWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, &errOut)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return nil, fmt.Errorf("port-forward to %s/%s:%d: %v %s", pod.Namespace, pod.Name, port, err, errOut.String())
	case <-ctx.Done():
		return nil, fmt.Errorf("port-forward to %s/%s:%d: %w", pod.Namespace, pod.Name, port, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		return nil, fmt.Errorf("port-forward to %s/%s: no local port: %v", pod.Namespace, pod.Name, err)
	}
	return getReport(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local))
}
