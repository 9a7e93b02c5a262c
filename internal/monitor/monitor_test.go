package monitor

import (
	"context"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/nodeview/api"
)

type fakeView struct{ r api.Report }

func (f *fakeView) Build(context.Context, bool) api.Report { return f.r }

type recorded struct{ events []Event }

func (r *recorded) Emit(e Event) { r.events = append(r.events, e) }

func (r *recorded) take() []Event { e := r.events; r.events = nil; return e }

func TestMonitorSpeaksOnChangeOnly(t *testing.T) {
	v := &fakeView{r: api.Report{PoolDir: "/pool", Pool: api.Pool{TotalBytes: 100, FreeBytes: 50},
		Volumes: []api.Volume{
			{Record: api.Record{ID: "fv-1"}, PV: "pv-1", PVCNamespace: "ns", PVCName: "data"},
			{Record: api.Record{ID: "fv-2"}},
		}}}
	sink := &recorded{}
	m := New("n1", v, sink)
	ctx := context.Background()

	m.Check(ctx)
	if ev := sink.take(); len(ev) != 0 {
		t.Fatalf("healthy node produced events: %+v", ev)
	}

	// Volume 1 loses its image, volume 2 (no PV known) its loop device, an
	// orphan appears and the pool fills up.
	v.r.Volumes[0].Health = []api.Condition{{Status: "DATA_LOSS", Reason: "ImageMissing", Message: "image file /pool/volumes/fv-1.img is missing"}}
	v.r.Volumes[1].Health = []api.Condition{{Status: "INACCESSIBLE", Reason: "LoopDeviceGone", Message: "gone"}}
	v.r.Quarantine = []string{"fv-9-20260101T000000.000000000Z.img"}
	v.r.Pool.FreeBytes = 3
	m.Check(ctx)
	ev := sink.take()
	want := []struct{ kind, name, reason, contains string }{
		{KindPV, "pv-1", ReasonVolumeAbnormal, "PVC ns/data): ImageMissing (DATA_LOSS)"},
		{KindNode, "n1", ReasonVolumeAbnormal, "volume fv-2: LoopDeviceGone"},
		{KindNode, "n1", ReasonOrphanQuarantined, "/pool/quarantine/fv-9-"},
		{KindNode, "n1", ReasonPoolNearlyFull, "3% free"},
	}
	if len(ev) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(ev), len(want), ev)
	}
	for i, w := range want {
		e := ev[i]
		if e.Kind != w.kind || e.Name != w.name || e.Reason != w.reason || e.Type != Warning || !strings.Contains(e.Message, w.contains) {
			t.Errorf("event %d = %+v, want %s/%s %s containing %q", i, e, w.kind, w.name, w.reason, w.contains)
		}
	}

	// Nothing changed: nothing said.
	m.Check(ctx)
	if ev := sink.take(); len(ev) != 0 {
		t.Fatalf("unchanged state produced events: %+v", ev)
	}

	// Recovery.
	v.r.Volumes[0].Health = nil
	v.r.Pool.FreeBytes = 60
	m.Check(ctx)
	ev = sink.take()
	if len(ev) != 2 || ev[0].Reason != ReasonVolumeRecovered || ev[0].Type != Normal || ev[1].Reason != ReasonPoolSpaceOK {
		t.Fatalf("recovery events = %+v", ev)
	}
}

// A directory volume's repaired quota escape is said once, on its PV.
func TestMonitorSpeaksOfDirectoryVolumes(t *testing.T) {
	v := &fakeView{r: api.Report{PoolDir: "/pool", Pool: api.Pool{TotalBytes: 100, FreeBytes: 50},
		DirVolumes: []api.Volume{{Record: api.Record{ID: "fv1-dir-0000000a-02"}, PV: "pv-esc", PVCNamespace: "ns", PVCName: "esc",
			Health: []api.Condition{{Status: "DEGRADED", Reason: "QuotaEscapeRepaired", Message: "at esc"}}}}}}
	sink := &recorded{}
	m := New("n1", v, sink)
	m.Check(context.Background())
	ev := sink.take()
	if len(ev) != 1 || ev[0].Kind != KindPV || ev[0].Name != "pv-esc" || ev[0].Reason != ReasonVolumeAbnormal ||
		!strings.Contains(ev[0].Message, "QuotaEscapeRepaired (DEGRADED): at esc") {
		t.Fatalf("events %+v, want one VolumeConditionAbnormal on pv-esc", ev)
	}
	m.Check(context.Background())
	if ev := sink.take(); len(ev) != 0 {
		t.Errorf("said again: %+v", ev)
	}
}
