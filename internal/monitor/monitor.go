// Package monitor watches, at a slow pace, what a user needs to hear about
// and says it once, when it changes: a volume's health turning abnormal
// (and back), an orphaned image in the pool's quarantine, the pool nearly
// full (and back). It reads the node view (internal/nodeview) and hands
// events to a Sink (internal/kubeevents in the driver).
//
// It runs only when events can be sent (an API server is configured); the
// driver's CSI calls never wait for it. It must not import gRPC, CSI or
// client-go.
package monitor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// Event reasons; kubectl filevol doctor matches on them.
const (
	ReasonVolumeAbnormal    = "VolumeConditionAbnormal"
	ReasonVolumeRecovered   = "VolumeConditionNormal"
	ReasonOrphanQuarantined = "OrphanQuarantined"
	ReasonPoolNearlyFull    = "PoolNearlyFull"
	ReasonPoolSpaceOK       = "PoolSpaceRecovered"
)

// Kinds and types of the events (the same strings Kubernetes uses).
const (
	KindNode = "Node"
	KindPV   = "PersistentVolume"
	Normal   = "Normal"
	Warning  = "Warning"
)

// NearlyFullPercent is the free-space share under which the pool is
// reported nearly full (the same threshold as NodeGetStorageHealth).
const NearlyFullPercent = 5

// Event is one thing to say about a PV or a Node.
type Event struct {
	Kind, Name            string
	Type, Reason, Message string
}

// Sink receives events; it must not block.
type Sink interface{ Emit(Event) }

// Viewer builds the node view (*nodeview.Builder).
type Viewer interface {
	Build(ctx context.Context, health bool) api.Report
}

// Monitor remembers what it said last, so it speaks only on change.
type Monitor struct {
	node string
	view Viewer
	sink Sink

	health   map[string][]string // volume ID -> abnormal reasons last seen
	orphans  map[string]bool
	poolFull bool
}

// New returns a Monitor for node.
func New(node string, view Viewer, sink Sink) *Monitor {
	return &Monitor{node: node, view: view, sink: sink,
		health: map[string][]string{}, orphans: map[string]bool{}}
}

// Run checks every interval until ctx is done.
func (m *Monitor) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check looks once and emits what changed since the last Check. The first
// Check reports every problem present (a restarted driver tells again).
func (m *Monitor) Check(ctx context.Context) {
	r := m.view.Build(ctx, true)
	for _, e := range r.Errors {
		klog.V(2).InfoS("monitor: could not read a source", "error", e)
	}
	m.checkVolumes(r)
	m.checkOrphans(r)
	m.checkPool(r)
}

func (m *Monitor) checkVolumes(r api.Report) {
	present := map[string]bool{}
	for _, v := range slices.Concat(r.Volumes, r.DirVolumes) {
		id := v.Record.ID
		present[id] = true
		var reasons []string
		for _, c := range v.Health {
			reasons = append(reasons, c.Reason)
		}
		slices.Sort(reasons)
		old := m.health[id]
		kind, name, who := m.subject(v)
		for _, c := range v.Health {
			if !slices.Contains(old, c.Reason) {
				m.sink.Emit(Event{Kind: kind, Name: name, Type: Warning, Reason: ReasonVolumeAbnormal,
					Message: fmt.Sprintf("%s: %s (%s): %s", who, c.Reason, c.Status, c.Message)})
			}
		}
		if len(old) > 0 && len(reasons) == 0 {
			m.sink.Emit(Event{Kind: kind, Name: name, Type: Normal, Reason: ReasonVolumeRecovered,
				Message: fmt.Sprintf("%s: no abnormal condition any more (was %s)", who, strings.Join(old, ", "))})
		}
		if len(reasons) > 0 {
			m.health[id] = reasons
		} else {
			delete(m.health, id)
		}
	}
	for id := range m.health {
		if !present[id] {
			delete(m.health, id) // deleted volume
		}
	}
}

// subject is what an event about v is attached to: its PV when the record
// names one, else this node.
func (m *Monitor) subject(v api.Volume) (kind, name, who string) {
	who = "volume " + v.Record.ID
	if v.PVCName != "" {
		who += " (PVC " + v.PVCNamespace + "/" + v.PVCName + ")"
	}
	if v.PV != "" {
		return KindPV, v.PV, who
	}
	return KindNode, m.node, who
}

func (m *Monitor) checkOrphans(r api.Report) {
	var fresh []string
	now := map[string]bool{}
	for _, q := range r.Quarantine {
		now[q] = true
		if !m.orphans[q] {
			fresh = append(fresh, q)
		}
	}
	m.orphans = now
	if len(fresh) == 0 {
		return
	}
	dir := r.PoolDir + "/quarantine"
	what := fmt.Sprintf("image %s/%s", dir, fresh[0])
	if len(fresh) > 1 {
		what = fmt.Sprintf("%d images in %s (%s)", len(fresh), dir, strings.Join(fresh, ", "))
	}
	m.sink.Emit(Event{Kind: KindNode, Name: m.node, Type: Warning, Reason: ReasonOrphanQuarantined,
		Message: fmt.Sprintf("%s without a volume record: moved aside, never deleted; it may hold data — inspect it (e.g. losetup -r and mount read-only) and remove it by hand", what)})
}

func (m *Monitor) checkPool(r api.Report) {
	if r.Pool.TotalBytes <= 0 {
		return
	}
	pct := r.Pool.FreeBytes * 100 / r.Pool.TotalBytes
	full := pct < NearlyFullPercent
	switch {
	case full && !m.poolFull:
		m.sink.Emit(Event{Kind: KindNode, Name: m.node, Type: Warning, Reason: ReasonPoolNearlyFull,
			Message: fmt.Sprintf("filevol pool %s has %d%% free (%d of %d bytes, %d promised to volumes): thin volumes may hit ENOSPC and new volumes may not fit; free space or grow the pool",
				r.PoolDir, pct, r.Pool.FreeBytes, r.Pool.TotalBytes, r.Pool.ProvisionedBytes)})
	case !full && m.poolFull:
		m.sink.Emit(Event{Kind: KindNode, Name: m.node, Type: Normal, Reason: ReasonPoolSpaceOK,
			Message: fmt.Sprintf("filevol pool %s has %d%% free again", r.PoolDir, pct)})
	}
	m.poolFull = full
}
