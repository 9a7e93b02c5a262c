package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/nodeview"
	"github.com/filevol/filevol/internal/nodeview/api"
)

// Labels of the per-volume gauges; namespace and persistentvolumeclaim
// match kubelet_volume_stats_* so the two join in queries.
var volumeLabels = []string{"volume_id", "persistentvolume", "namespace", "persistentvolumeclaim"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descPoolCapacity    = desc("filevol_pool_capacity_bytes", "Size of the pool filesystem.")
	descPoolUsed        = desc("filevol_pool_used_bytes", "Bytes of the pool filesystem in use (capacity minus free).")
	descPoolFree        = desc("filevol_pool_free_bytes", "Free bytes of the pool filesystem (available to unprivileged writers).")
	descPoolReserved    = desc("filevol_pool_reserved_bytes", "Bytes kept free on purpose and never promised (--reserved-capacity).")
	descPoolAvailable   = desc("filevol_pool_available_bytes", "Bytes that can still be promised to new volumes (free minus reserved).")
	descPoolProvisioned = desc("filevol_pool_provisioned_bytes", "Sum of the capacities of every volume in the pool (may exceed capacity when thin).")
	descVolumes         = desc("filevol_volumes", "Volumes in the pool, by state as the kernel shows it (idle, attached, staged, published).", "state")
	descSnapshots       = desc("filevol_snapshots", "Snapshots in the pool.")
	descEncrypted       = desc("filevol_volumes_encrypted", "Volumes in the pool whose data is encrypted at rest (the StorageClass's encryption parameter).")
	descLoops           = desc("filevol_loop_devices", "Loop devices backed by files in the pool.")
	descQuarantined     = desc("filevol_quarantined_images", "Image files without a record, moved to the pool's quarantine directory.")
	descVolUsed         = desc("filevol_volume_used_bytes", "Bytes used in a staged volume's filesystem (statfs).", volumeLabels...)
	descVolSize         = desc("filevol_volume_capacity_bytes", "Size of a staged volume's filesystem (statfs).", volumeLabels...)
	descVolAllocated    = desc("filevol_volume_allocated_bytes", "Bytes a staged volume's image file occupies in the pool.", volumeLabels...)
	descCollectErrors   = desc("filevol_metrics_collect_errors", "Sources that could not be read during this scrape (see the driver's log).")
)

var states = []string{api.StateIdle, api.StateAttached, api.StateStaged, api.StatePublished}

// poolCollector reads the pool and the kernel when scraped.
type poolCollector struct {
	view      *nodeview.Builder
	snapshots func() (int, error)
}

func newPoolCollector(v *nodeview.Builder, snapshots func() (int, error)) *poolCollector {
	return &poolCollector{view: v, snapshots: snapshots}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolCapacity, descPoolUsed, descPoolFree, descPoolReserved,
		descPoolAvailable, descPoolProvisioned, descVolumes, descEncrypted, descLoops, descQuarantined,
		descVolUsed, descVolSize, descVolAllocated, descCollectErrors} {
		ch <- d
	}
	if c.snapshots != nil {
		ch <- descSnapshots
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.view.Build(context.Background(), false)
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	errs := len(r.Errors)
	gauge(descPoolCapacity, r.Pool.TotalBytes)
	gauge(descPoolUsed, r.Pool.TotalBytes-r.Pool.FreeBytes)
	gauge(descPoolFree, r.Pool.FreeBytes)
	gauge(descPoolReserved, r.Pool.ReservedBytes)
	gauge(descPoolAvailable, r.Pool.AvailableBytes)
	gauge(descPoolProvisioned, r.Pool.ProvisionedBytes)
	gauge(descLoops, int64(r.LoopDevices))
	gauge(descQuarantined, int64(len(r.Quarantine)))
	byState := map[string]int64{}
	var encrypted int64
	for _, v := range r.Volumes {
		byState[v.State]++
		if v.Record.Encryption != "" {
			encrypted++
		}
		if v.State != api.StateStaged && v.State != api.StatePublished {
			continue
		}
		labels := []string{v.Record.ID, v.PV, v.PVCNamespace, v.PVCName}
		gauge(descVolAllocated, v.Image.AllocatedBytes, labels...)
		if v.Usage != nil {
			gauge(descVolUsed, v.Usage.UsedBytes, labels...)
			gauge(descVolSize, v.Usage.TotalBytes, labels...)
		}
	}
	for _, s := range states {
		gauge(descVolumes, byState[s], s)
	}
	gauge(descEncrypted, encrypted)
	if c.snapshots != nil {
		if n, err := c.snapshots(); err != nil {
			errs++
			r.Errors = append(r.Errors, "snapshots: "+err.Error())
		} else {
			gauge(descSnapshots, int64(n))
		}
	}
	gauge(descCollectErrors, int64(errs))
	for _, e := range r.Errors {
		klog.V(2).InfoS("metrics: could not read a source", "error", e)
	}
}
