package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// schedStat is the scheduler's account of a process, summed over its
// threads (/proc/<pid>/task/*/schedstat): time on a CPU and time runnable
// but waiting for one. What a call's latency holds beyond both is time
// blocked, mostly in the kernel waiting for the disk (fsync).
type schedStat struct{ onCPU, runWait time.Duration }

func readSched(pid string) schedStat {
	var s schedStat
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that just exited
		}
		var run, wait int64
		if _, err := fmt.Sscan(string(data), &run, &wait); err == nil {
			s.onCPU += time.Duration(run)
			s.runWait += time.Duration(wait)
		}
	}
	return s
}

func (s schedStat) sub(o schedStat) schedStat {
	return schedStat{s.onCPU - o.onCPU, s.runWait - o.runWait}
}

// schedSnap is the driver's and the harness's schedStat, the machine's
// busy time and the pool device's I/O counters, at one instant.
type schedSnap struct {
	at              time.Time
	driver, harness schedStat
	machine         time.Duration
	disk            diskStat
}

func (b *bench) schedSnap() schedSnap {
	return schedSnap{at: time.Now(), driver: readSched(fmt.Sprint(b.d.cmd.Process.Pid)), harness: readSched("self"),
		machine: machineBusy(), disk: readDisk(b.poolDir)}
}

// machineBusy is the time all CPUs spent on anything but idle and iowait
// since boot (/proc/stat). Work the driver hands to the kernel (writeback,
// an fsync run by a kernel worker, interrupts) shows here and not in the
// driver's own threads.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// diskStat holds the counters of /sys/dev/block/M:m/stat (see the kernel's
// Documentation/block/stat.rst) that tell what a durable create costs the
// disk: write requests and cache flushes. They count the whole device, so
// other work on the machine adds to them.
type diskStat struct {
	ok              bool
	writes, flushes int64
}

func readDisk(dir string) diskStat {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return diskStat{}
	}
	data, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return diskStat{} // tmpfs, or a partition layout sysfs does not show
	}
	f := strings.Fields(string(data))
	if len(f) < 17 {
		return diskStat{}
	}
	w, _ := strconv.ParseInt(f[4], 10, 64)
	fl, _ := strconv.ParseInt(f[15], 10, 64)
	return diskStat{ok: true, writes: w, flushes: fl}
}

// costPerCall splits the wall time of n calls made since s0 into CPU and
// run-queue wait of the driver and of the harness, per call. On a machine
// with spare CPUs the run-queue wait is near zero; a large one means the
// figures measure the machine's load as much as the driver.
func (b *bench) costPerCall(what string, n int, s0 schedSnap) {
	s1 := b.schedSnap()
	wall := s1.at.Sub(s0.at)
	d, h := s1.driver.sub(s0.driver), s1.harness.sub(s0.harness)
	per := func(x time.Duration) string { return ms(x / time.Duration(n)) }
	b.rep.detail(what+": CPU per call (summed over threads)", "driver on CPU %s, runnable waiting for a CPU %s; harness on CPU %s, waiting %s; whole machine busy %s; wall %s per call; harness+driver use %.0f%% of %d CPUs, the machine %.0f%%",
		per(d.onCPU), per(d.runWait), per(h.onCPU), per(h.runWait), per(s1.machine-s0.machine), per(wall),
		100*float64(d.onCPU+h.onCPU)/float64(wall)/float64(runtime.NumCPU()), runtime.NumCPU(),
		100*float64(s1.machine-s0.machine)/float64(wall)/float64(runtime.NumCPU()))
	if s0.disk.ok && s1.disk.ok {
		b.rep.detail(what+": pool device I/O per call", "%.2f write requests, %.2f cache flushes (whole device)",
			float64(s1.disk.writes-s0.disk.writes)/float64(n), float64(s1.disk.flushes-s0.disk.flushes)/float64(n))
	}
}
