// Package metrics owns filevol's Prometheus metrics: the registry, the
// per-call counters and latency histograms fed by the gRPC interceptor
// (through csi.CallObserver), the gauges the garbage collector sets, and a
// collector that reads the pool and the kernel at scrape time — no
// background loop, so an unscraped driver does no work for metrics.
//
// Names follow Prometheus conventions: the filevol_ prefix, base units
// (_bytes, _seconds) and _total for counters.
//
// It must not import gRPC, the CSI spec, internal/csi or client-go: csi
// calls it through an interface, and app wires the two together.
package metrics

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/filevol/filevol/internal/nodeview"
)

// Path is where the metrics are served.
const Path = "/metrics"

// Config says where the scrape-time gauges come from.
type Config struct {
	// View reads the pool and the kernel; nil exports no pool or volume
	// gauges (call metrics only).
	View *nodeview.Builder
	// Snapshots counts the pool's snapshots; nil leaves
	// filevol_snapshots out.
	Snapshots func() (int, error)
}

// Metrics is one process's metrics. Its methods are safe for concurrent use.
type Metrics struct {
	reg     *prometheus.Registry
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	orphans prometheus.Gauge
	sweep   prometheus.Gauge
}

// New registers every filevol metric, plus the Go runtime and process
// collectors, on a registry of its own.
func New(cfg Config) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "filevol_csi_calls_total",
			Help: "CSI calls served, by gRPC service, method and status code.",
		}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "filevol_csi_call_duration_seconds",
			Help: "Time to serve a CSI call, by gRPC service and method.",
			// From a cached GetCapacity (< 1 ms) to a mkfs of a large
			// volume or a kubelet timeout (2 min).
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"service", "method"}),
		orphans: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "filevol_orphans",
			Help: "Orphaned image files (no record) found by the last garbage-collection pass.",
		}),
		sweep: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "filevol_gc_sweep_duration_seconds",
			Help: "How long the last garbage-collection pass took (it reads every loop device, mount and pool file of the node).",
		}),
	}
	m.reg.MustRegister(m.calls, m.latency, m.orphans, m.sweep,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.View != nil {
		m.reg.MustRegister(newPoolCollector(cfg.View, cfg.Snapshots))
	}
	return m
}

// ObserveCall records one finished call: fullMethod as gRPC gives it
// ("/csi.v1.Node/NodeStageVolume"), code as codes.Code.String() ("OK",
// "NotFound", ...). It implements csi.CallObserver.
func (m *Metrics) ObserveCall(fullMethod, code string, d time.Duration) {
	service, method := splitMethod(fullMethod)
	m.calls.WithLabelValues(service, method, code).Inc()
	m.latency.WithLabelValues(service, method).Observe(d.Seconds())
}

// SetOrphans is for the garbage collector: the orphans its last pass found.
func (m *Metrics) SetOrphans(n int) { m.orphans.Set(float64(n)) }

// SetSweepDuration is for the garbage collector: how long its last pass took.
func (m *Metrics) SetSweepDuration(d time.Duration) { m.sweep.Set(d.Seconds()) }

// Handler serves the registry in the Prometheus text (or protobuf,
// when asked) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// splitMethod turns "/csi.v1.Node/NodeStageVolume" into "csi.v1.Node",
// "NodeStageVolume".
func splitMethod(full string) (service, method string) {
	s, m, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	if !ok {
		return "unknown", full
	}
	return s, m
}
