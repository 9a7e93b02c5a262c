//go:build e2e

package podtime

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

type report struct {
	Start, End         time.Time
	LoadStart, LoadEnd string
	Rounds, Burst      int
	Classes            []string
	Provisioner        map[string]string // class -> provisioner
	Sets               []result
}

type result struct {
	Mode  string // "serial" (one at a time) or "burst" (all at once)
	Class string
	sampleSet
}

func (rep *report) add(mode, class string, s sampleSet) {
	for i := range rep.Sets {
		if rep.Sets[i].Mode == mode && rep.Sets[i].Class == class {
			rep.Sets[i].Traces = append(rep.Sets[i].Traces, s.Traces...)
			rep.Sets[i].Calls = mergeCalls(rep.Sets[i].Calls, s.Calls)
			return
		}
	}
	rep.Sets = append(rep.Sets, result{mode, class, s})
}

// mergeCalls adds the calls of b to a (weighted means).
func mergeCalls(a, b perCall) perCall {
	out := perCall{}
	for _, m := range pathCalls {
		x, y := a[m], b[m]
		if n := x.Calls + y.Calls; n > 0 {
			out[m] = struct{ Mean, Calls float64 }{(x.Mean*x.Calls + y.Mean*y.Calls) / n, n}
		}
	}
	return out
}

// The phases of a sample, in order; each ends where the next begins.
var phases = []struct {
	Name, What string
	span       func(*trace) time.Duration
}{
	{"schedule", "claim created → the scheduler picked the node (selected-node on the claim)", func(t *trace) time.Duration { return t.Selected.Sub(t.Created) }},
	{"provision", "→ claim Bound (the provisioner made the volume and its PV; the PV controller bound it)", func(t *trace) time.Duration { return t.Bound.Sub(t.Selected) }},
	{"bind", "→ pod on the node (the scheduler's PreBind saw the claim bound; it polls each second)", func(t *trace) time.Duration { return t.OnNode.Sub(t.Bound) }},
	{"node", "→ pod Running (kubelet: stage, publish, sandbox, container)", func(t *trace) time.Duration { return t.Running.Sub(t.OnNode) }},
}

func total(t *trace) time.Duration { return t.Running.Sub(t.Created) }

// pct is the nearest-rank percentile p (0..100) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func each(ts []*trace, f func(*trace) time.Duration) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = f(t)
	}
	return out
}

func mean(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(max(len(ds), 1))
}

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func (rep *report) find(mode, class string) *result {
	for i := range rep.Sets {
		if rep.Sets[i].Mode == mode && rep.Sets[i].Class == class {
			return &rep.Sets[i]
		}
	}
	return nil
}

func (rep *report) markdown() string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	w("# Time to a running pod: filevol and rancher/local-path-provisioner")
	w("")
	w("%s → %s UTC, %d cores, load average %s at the start and %s at the end.",
		rep.Start.Format("2006-01-02 15:04:05"), rep.End.Format("15:04:05"), runtime.NumCPU(), rep.LoadStart, rep.LoadEnd)
	w("One at a time: %d rounds per class, the classes taking turns. All at once: %d claims and %d pods per class, created together.", rep.Rounds, rep.Burst, rep.Burst)
	w("Rerun: `E2E_SUITE=0 E2E_DOCTOR=0 E2E_CHART=0 E2E_STORIES=0 test/e2e/run.sh` (E2E_PODTIME=1 is the default).")
	w("")
	w("| mode | class | pods | p50 | p95 | mean | " + phaseHeads() + " |")
	w("|---|---|---|---|---|---|" + strings.Repeat("---|", len(phases)))
	for _, s := range rep.Sets {
		tot := each(s.Traces, total)
		row := fmt.Sprintf("| %s | %s | %d | %s | %s | %s |", s.Mode, s.Class, len(s.Traces), sec(pct(tot, 50)), sec(pct(tot, 95)), sec(mean(tot)))
		for _, p := range phases {
			row += " " + sec(pct(each(s.Traces, p.span), 50)) + " |"
		}
		w("%s", row)
	}
	w("")
	w("Phases (p50 of each; they need not add up to the total's p50):")
	for _, p := range phases {
		w("- %s: %s", p.Name, p.What)
	}
	rep.ratios(w)
	rep.calls(w)
	return b.String()
}

func phaseHeads() string {
	var h []string
	for _, p := range phases {
		h = append(h, p.Name+" p50")
	}
	return strings.Join(h, " | ")
}

// ratios: each filevol class against local-path, p50 and p95, per mode.
func (rep *report) ratios(w func(string, ...any)) {
	ref := ""
	for _, c := range rep.Classes {
		if rep.Provisioner[c] == "rancher.io/local-path" {
			ref = c
		}
	}
	if ref == "" {
		return
	}
	w("")
	w("| mode | class | p50 ÷ %s p50 | p95 ÷ %s p95 | goal: p50 ratio ≤ 0.50 |", ref, ref)
	w("|---|---|---|---|---|")
	for _, mode := range []string{"serial", "burst"} {
		base := rep.find(mode, ref)
		for _, c := range rep.Classes {
			s := rep.find(mode, c)
			if c == ref || s == nil || base == nil {
				continue
			}
			r50 := pct(each(s.Traces, total), 50).Seconds() / pct(each(base.Traces, total), 50).Seconds()
			r95 := pct(each(s.Traces, total), 95).Seconds() / pct(each(base.Traces, total), 95).Seconds()
			verdict := "met"
			if r50 > 0.5 {
				verdict = fmt.Sprintf("missed by %.2f", r50-0.5)
			}
			w("| %s | %s | %.2f | %.2f | %s |", mode, c, r50, r95, verdict)
		}
	}
}

// calls: what filevol's own calls took (its /metrics), and local-path's
// helper pods, beside the phases they fall in.
func (rep *report) calls(w func(string, ...any)) {
	w("")
	w("| mode | class | CreateVolume mean (provision) | NodeStageVolume mean (node) | NodePublishVolume mean (node) | helper pod p50 (provision) |")
	w("|---|---|---|---|---|---|")
	for _, s := range rep.Sets {
		cell := func(m string) string {
			c, ok := s.Calls[m]
			if !ok {
				return "–"
			}
			return fmt.Sprintf("%.3f s ×%d", c.Mean, int(c.Calls))
		}
		helper := "–"
		if !s.Traces[0].HelperDone.IsZero() {
			helper = sec(pct(each(s.Traces, func(t *trace) time.Duration { return t.HelperDone.Sub(t.HelperCreated) }), 50))
		}
		w("| %s | %s | %s | %s | %s | %s |", s.Mode, s.Class, cell("CreateVolume"), cell("NodeStageVolume"), cell("NodePublishVolume"), helper)
	}
}

// rawTrace is a sample for podtime.json: milliseconds after the claim's creation.
type rawTrace struct {
	Mode, Class, Claim                                 string
	Selected, Bound, OnNode, Running, Helper, HelperOK int64
}

func (rep *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var raw []rawTrace
	ms := func(t, from time.Time) int64 {
		if t.IsZero() {
			return -1
		}
		return t.Sub(from).Milliseconds()
	}
	for _, s := range rep.Sets {
		for _, t := range s.Traces {
			raw = append(raw, rawTrace{s.Mode, s.Class, t.Claim, ms(t.Selected, t.Created), ms(t.Bound, t.Created),
				ms(t.OnNode, t.Created), ms(t.Running, t.Created), ms(t.HelperCreated, t.Created), ms(t.HelperDone, t.Created)})
		}
	}
	j, err := json.MarshalIndent(struct {
		*report
		Samples []rawTrace
	}{rep, raw}, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "podtime.json"), j, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "podtime.md"), []byte(rep.markdown()), 0o644)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
