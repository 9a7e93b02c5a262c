package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sharedWorkloads are the sharedfs part's fio jobs in the staged volume's
// ext4, all O_DIRECT there (so the volume's own page cache is out of the
// way and what is compared is the loop device and the file below it).
// The write jobs end with fsync (fio end_fsync=1): the ext4's flush
// reaches the loop device, which fsyncs the image file, so a write counts
// only once the shared filesystem has it; their figure is what the job
// wrote over its whole wall time, that fsync and fio's start included.
var sharedWorkloads = []workload{
	{"1M seq write QD1, fsync at end", "write", "1m", 1, true, false},
	{"1M seq write QD8, fsync at end", "write", "1m", 8, true, false},
	{"1M seq read QD8", "read", "1m", 8, true, false},
	{"4k randwrite QD1, fsync at end", "randwrite", "4k", 1, false, false},
	{"4k randwrite QD16, fsync at end", "randwrite", "4k", 16, false, false},
	{"4k randread QD16", "randread", "4k", 16, false, false},
}

// dioVariant is one column of the data path: a pool with its volume's
// loop device's direct I/O on or off.
type dioVariant struct {
	p   *sharedPool
	dio bool
}

func (v dioVariant) label() string {
	if v.dio {
		return v.p.name + ", loop direct I/O on"
	}
	return v.p.name + ", loop direct I/O off"
}

// sharedData stages one volume per pool, fills its fio file once, then
// runs every workload on every (pool, direct I/O) variant, interleaved
// job by job in every round, the order rotated from round to round.
func (b *bench) sharedData(ctx context.Context, pools []*sharedPool) error {
	size := b.cfg.fioSize
	var variants []dioVariant
	for _, p := range pools {
		t, err := p.up(ctx, "io-"+p.key, size+size/4+512<<20, true)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		p.vol = t
		sys, _, err := deviceSysfs(t.target)
		if err == nil {
			p.loopDev, err = loopDevOf(sys)
		}
		if err != nil {
			return fmt.Errorf("%s: the volume's loop device: %w", p.name, err)
		}
		p.dioWhat = deviceFacts(t.target)
		b.rep.detail("Data path: "+p.name+" volume's device as filevol staged it", "%s: %s", p.loopDev, p.dioWhat)
		start := time.Now()
		if err := fioFill(ctx, t.file, size); err != nil {
			return fmt.Errorf("fill %s: %w", p.name, err)
		}
		b.rep.detail("Data path: "+p.name+" fill", "%d MiB written O_DIRECT (loop direct I/O as staged) in %s", size>>20, time.Since(start).Round(time.Millisecond))
		variants = append(variants, dioVariant{p, true}, dioVariant{p, false})
	}
	start := time.Now()
	res, err := interleaved(b.cfg.fioRounds, len(sharedWorkloads), len(variants), func(w, vi int) (fioResult, error) {
		v := variants[vi]
		if err := setLoopDirectIO(v.p.loopDev, v.dio); err != nil {
			return fioResult{}, fmt.Errorf("%s: %w", v.label(), err)
		}
		r, err := sharedFioJob(ctx, v.p.vol.file, size, sharedWorkloads[w], b.cfg.fioRuntime)
		if err != nil {
			return r, fmt.Errorf("%s on %s: %w", sharedWorkloads[w].name, v.label(), err)
		}
		return r, nil
	})
	if err != nil {
		return err
	}
	b.rep.detail("Shared data path run", "%d rounds × %d workloads × %d variants, %s each (+1 s ramp for reads), %d MiB file, in %s; load average after: %s",
		b.cfg.fioRounds, len(sharedWorkloads), len(variants), b.cfg.fioRuntime, size>>20, time.Since(start).Round(time.Second), loadAvg())
	b.reportShared(variants, res)
	return nil
}

// reportShared adds per workload and variant the median and range of the
// rounds, and per pool the median of the per-round ratios off/on.
func (b *bench) reportShared(variants []dioVariant, res [][][]fioResult) {
	for w, wl := range sharedWorkloads {
		unit, scale := "IOPS", 1.0
		if wl.seq {
			unit, scale = "MiB/s", 1.0/1024
		}
		for vi, v := range variants {
			xs := make([]float64, len(res[w][vi]))
			for i, r := range res[w][vi] {
				xs[i] = r.throughput(wl) * scale
			}
			med, lo, hi := spread(xs)
			b.rep.info("S4", fmt.Sprintf("%s, %s: %s", wl.name, v.label(), unit), fmt.Sprintf("%.0f (%.0f–%.0f; rounds %s); mean clat %s",
				med, lo, hi, fmtRounds(res[w][vi], wl, scale), ms(medianDur(res[w][vi], func(r fioResult) time.Duration { return r.clat }))))
			if v.dio {
				continue
			}
			on := res[w][vi-1] // the variants come in pairs, on then off
			ratios := make([]float64, len(xs))
			for i := range ratios {
				ratios[i] = res[w][vi][i].throughput(wl) / on[i].throughput(wl)
			}
			med, lo, hi = spread(ratios)
			b.rep.info("S5", fmt.Sprintf("%s, %s: direct I/O off vs on", wl.name, v.p.name), fmt.Sprintf("%.0f %% (%.0f–%.0f)", 100*med, 100*lo, 100*hi))
		}
	}
}

// sharedFioJob runs one of sharedWorkloads on file for runtime. Reads
// have a 1 s ramp and fio's own figures; writes (no ramp: the fsync
// ends the job) are measured by bytes written over the process's wall time.
func sharedFioJob(ctx context.Context, file string, size int64, w workload, runtime time.Duration) (fioResult, error) {
	args := []string{"--name=bench", "--filename=" + file, "--direct=1", "--ioengine=libaio",
		"--rw=" + w.rw, "--bs=" + w.bs, "--iodepth=" + strconv.Itoa(w.depth), "--size=" + strconv.FormatInt(size, 10),
		"--runtime=" + strconv.Itoa(int(runtime.Seconds())) + "s", "--time_based",
		"--randrepeat=1", "--norandommap", "--output-format=json"}
	write := strings.Contains(w.rw, "write")
	if write {
		args = append(args, "--end_fsync=1")
	} else {
		args = append(args, "--ramp_time=1s")
	}
	start := time.Now()
	out, err := runFio(ctx, args)
	wall := time.Since(start)
	if err != nil {
		return fioResult{}, err
	}
	r, err := parseFio(out, write)
	if err != nil || !write {
		return r, err
	}
	bytes, err := fioIOBytes(out)
	if err != nil {
		return r, err
	}
	bs := int64(1 << 20)
	if w.bs == "4k" {
		bs = 4096
	}
	r.bwKiB = float64(bytes) / 1024 / wall.Seconds()
	r.iops = float64(bytes/bs) / wall.Seconds()
	return r, nil
}

// fioIOBytes is the bytes fio's one job wrote.
func fioIOBytes(out []byte) (int64, error) {
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var j struct {
		Jobs []struct {
			Write struct {
				IOBytes int64 `json:"io_bytes"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &j); err != nil || len(j.Jobs) != 1 {
		return 0, fmt.Errorf("fio output: io_bytes not found (%v)", err)
	}
	return j.Jobs[0].Write.IOBytes, nil
}

// loopDevOf names the loop device whose sysfs directory is sys
// (/sys/dev/block/M:m, a link to .../block/loopN).
func loopDevOf(sys string) (string, error) {
	real, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "", err
	}
	name := filepath.Base(real)
	if !strings.HasPrefix(name, "loop") {
		return "", fmt.Errorf("%s is %s, not a loop device", sys, name)
	}
	return "/dev/" + name, nil
}

// setLoopDirectIO switches dev's direct I/O (LOOP_SET_DIRECT_IO; the
// kernel drains the queue first) and checks that sysfs shows it: the
// kernel refuses direct I/O on a file whose filesystem cannot do it.
func setLoopDirectIO(dev string, on bool) error {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	v := 0
	if on {
		v = 1
	}
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_DIRECT_IO, v); err != nil {
		return fmt.Errorf("LOOP_SET_DIRECT_IO %d on %s: %w", v, dev, err)
	}
	got, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop/dio"))
	if err != nil {
		return err
	}
	if want := strconv.Itoa(v); strings.TrimSpace(string(got)) != want {
		return fmt.Errorf("%s: loop/dio is %s after LOOP_SET_DIRECT_IO %s", dev, strings.TrimSpace(string(got)), want)
	}
	return nil
}
