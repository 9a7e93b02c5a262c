package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// abSetting is a loop device setting --fio-ab compares: a queue attribute
// in sysfs, the values tried, the volumes tried on and the workloads that
// can show a difference.
type abSetting struct {
	attr   string // under /sys/dev/block/M:m/
	values []string
	vols   []struct{ name, fs string }
	wls    []workload
}

var abSettings = map[string]abSetting{
	// The I/O scheduler orders and merges requests before the loop driver
	// sees them; direct I/O, so that the page cache does not hide it.
	"scheduler": {attr: "queue/scheduler", values: []string{"none", "mq-deadline"},
		vols: []struct{ name, fs string }{{"ext4 mount", "ext4"}, {"block", ""}}, wls: workloads},
	// Read-ahead acts only on reads through the page cache: O_DIRECT
	// bypasses it, so the workloads are buffered. 2560 is what the kernel
	// gives a loop device over this pool (the report prints the default).
	"read-ahead": {attr: "queue/read_ahead_kb", values: []string{"0", "128", "2560"},
		vols: []struct{ name, fs string }{{"ext4 mount", "ext4"}, {"xfs mount", "xfs"}}, wls: bufferedWorkloads},
}

// abVariant is one column of an A/B run: a target, and for a volume the
// value its device's setting is written to before each job.
type abVariant struct {
	t     ioTarget
	sys   string // the device's sysfs directory ("" for the plain file)
	value string
}

// selected is the value a sysfs queue attribute is set to: the one in
// brackets for a choice ("[none] mq-deadline"), else the whole value.
func selected(attr string) string {
	attr = strings.TrimSpace(attr)
	if i := strings.IndexByte(attr, '['); i >= 0 {
		if j := strings.IndexByte(attr[i:], ']'); j > 0 {
			return attr[i+1 : i+j]
		}
	}
	return attr
}

func (v abVariant) label() string {
	if v.sys == "" {
		return v.t.name
	}
	return v.t.name + " @ " + v.value
}

// dataPathAB runs the data-path comparison with one device setting varied:
// every value on every volume, and the plain file, interleaved job by job
// in every round (order rotated), each figure a ratio to the plain file's
// in the same round, and each value a ratio to the first value's on the
// same volume in the same round (the A/B itself).
func (b *bench) dataPathAB(ctx context.Context) error {
	set := abSettings[b.cfg.fioAB]
	size := b.cfg.fioSize
	plain := ioTarget{name: "plain file", file: filepath.Join(filepath.Dir(b.poolDir), "plain.fio")}
	targets := []ioTarget{plain}
	defer func() { b.teardownIOTargets(targets[1:]) }()
	for _, v := range set.vols {
		t, err := b.publishIOTarget(ctx, v.name, v.fs, size)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	b.rep.machine = append(b.rep.machine, "Load average before the data path A/B: "+loadAvg())
	variants := []abVariant{{t: plain}}
	for _, t := range targets {
		if err := fioFill(ctx, t.file, size); err != nil {
			return fmt.Errorf("fill %s: %w", t.name, err)
		}
		if t.id == "" {
			continue
		}
		sys, _, err := deviceSysfs(t.file)
		if err != nil {
			return err
		}
		b.rep.detail("Data path: "+t.name+" device as the driver left it", "%s", deviceFacts(t.file))
		// Put back as found: a loop device's queue keeps its scheduler
		// across detach and attach, so a value left here would be the next
		// user's of this device number, whoever that is.
		orig, err := os.ReadFile(filepath.Join(sys, set.attr))
		if err != nil {
			return err
		}
		defer func() { _ = os.WriteFile(filepath.Join(sys, set.attr), []byte(selected(string(orig))), 0) }()
		for _, val := range set.values {
			variants = append(variants, abVariant{t: t, sys: sys, value: val})
		}
	}
	start := time.Now()
	res, err := interleaved(b.cfg.fioRounds, len(set.wls), len(variants), func(w, vi int) (fioResult, error) {
		v := variants[vi]
		if v.sys != "" {
			if err := os.WriteFile(filepath.Join(v.sys, set.attr), []byte(v.value), 0); err != nil {
				return fioResult{}, fmt.Errorf("%s %s = %s: %w", v.t.name, set.attr, v.value, err)
			}
		}
		r, err := fioJob(ctx, v.t.file, size, set.wls[w], time.Second, b.cfg.fioRuntime)
		if err != nil {
			return r, fmt.Errorf("%s on %s: %w", set.wls[w].name, v.label(), err)
		}
		return r, nil
	})
	if err != nil {
		return err
	}
	b.rep.detail("Data path A/B run", "%s: %d rounds × %d workloads × %d variants, %s each, %d MiB per target, in %s; load average after: %s",
		set.attr, b.cfg.fioRounds, len(set.wls), len(variants), b.cfg.fioRuntime, size>>20, time.Since(start).Round(time.Second), loadAvg())
	b.reportAB(set, variants, res)
	return nil
}

// reportAB adds, per workload and variant, the median ratio to the plain
// file (spread in brackets) and, for every value after the first, the
// median ratio to the first value on the same volume.
func (b *bench) reportAB(set abSetting, variants []abVariant, res [][][]fioResult) {
	ratio := func(a, base []fioResult, wl workload) string {
		xs := make([]float64, len(a))
		for i := range a {
			xs[i] = a[i].throughput(wl) / base[i].throughput(wl)
		}
		med, lo, hi := spread(xs)
		return fmt.Sprintf("%.1f %% (%.1f–%.1f)", 100*med, 100*lo, 100*hi)
	}
	for w, wl := range set.wls {
		unit, scale := "IOPS", 1.0
		if wl.seq {
			unit, scale = "MiB/s", 1.0/1024
		}
		b.rep.detail("A/B, plain file: "+wl.name, "%s %s (per round: %s)", unit,
			fmtMedian(res[w][0], func(r fioResult) float64 { return r.throughput(wl) * scale }), fmtRounds(res[w][0], wl, scale))
		first := 0
		for vi := 1; vi < len(variants); vi++ {
			v := variants[vi]
			what := fmt.Sprintf("%s, %s: %s vs the plain file", wl.name, v.label(), unit)
			b.rep.info("D", what, ratio(res[w][vi], res[w][0], wl))
			if v.value == set.values[0] {
				first = vi
			} else {
				b.rep.info("D", fmt.Sprintf("%s, %s: %s vs %s", wl.name, v.label(), unit, set.values[0]),
					ratio(res[w][vi], res[w][first], wl))
			}
			b.rep.detail("A/B, "+v.label()+": "+wl.name, "%s %s (per round: %s)", unit,
				fmtMedian(res[w][vi], func(r fioResult) float64 { return r.throughput(wl) * scale }), fmtRounds(res[w][vi], wl, scale))
		}
	}
	b.rep.note("--fio-ab %s: %s values %s", b.cfg.fioAB, set.attr, strings.Join(set.values, ", "))
}
