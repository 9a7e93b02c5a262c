package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/metrics"
	"github.com/filevol/filevol/internal/nodeview"
	"github.com/filevol/filevol/internal/nodeview/api"
)

// serveHTTP serves, on addr:
//
//	/healthz         200 "ok" when healthy() is nil, 503 with the reason otherwise
//	/metrics         Prometheus metrics
//	/debug/volumes   the read-only node view (JSON) that kubectl filevol reads
//
// Nothing here changes state. The address is the operator's choice: the
// default manifests bind it to the pod IP so Prometheus and the API
// server's pod proxy reach it; on a host, 127.0.0.1.
func serveHTTP(addr string, healthy func() error, m *metrics.Metrics, view *nodeview.Builder) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-endpoint %s: %w", addr, err)
	}
	hs := &http.Server{Handler: httpMux(healthy, m, view), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "HTTP endpoint stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}

func httpMux(healthy func() error, m *metrics.Metrics, view *nodeview.Builder) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle(metrics.Path, m.Handler())
	mux.Handle(api.Path, view.Handler())
	return mux
}
