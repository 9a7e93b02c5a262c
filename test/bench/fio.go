package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// workload is one fio job shape of the data-path comparison.
type workload struct {
	name  string // as reported
	rw    string // fio --rw
	bs    string // fio --bs
	depth int    // fio --iodepth
	// seq workloads are compared by bandwidth, random ones by IOPS (the
	// same ratio for a fixed block size, but the unit users quote).
	seq bool
	// buffered workloads read through the page cache (psync, no O_DIRECT),
	// where read-ahead acts; direct I/O bypasses it.
	buffered bool
}

// workloads are the issue's: 4k random read and write at queue depth 1
// (latency-bound, as a database's commit path) and 32 (throughput-bound),
// and 1 MiB sequential read and write (backups, bulk loads).
var workloads = []workload{
	{"4k randread QD1", "randread", "4k", 1, false, false},
	{"4k randwrite QD1", "randwrite", "4k", 1, false, false},
	{"4k randread QD32", "randread", "4k", 32, false, false},
	{"4k randwrite QD32", "randwrite", "4k", 32, false, false},
	{"1M seq read QD8", "read", "1m", 8, true, false},
	{"1M seq write QD8", "write", "1m", 8, true, false},
}

// bufferedWorkloads are the reads read-ahead acts on: a program reading a
// file front to back in small and in large pieces, and one reading at
// random (where read-ahead can only cost).
var bufferedWorkloads = []workload{
	{"4k seq read, buffered", "read", "4k", 1, true, true},
	{"1M seq read, buffered", "read", "1m", 1, true, true},
	{"4k randread QD1, buffered", "randread", "4k", 1, false, true},
}

// interleaved runs job(w, t) for each of nw workloads on each of nt
// targets in every one of rounds rounds, job by job, so that the
// machine's load falls on all targets alike; the targets' order is
// rotated from round to round and workload to workload, so no target
// always follows the same one. It returns res[w][t][round].
func interleaved(rounds, nw, nt int, job func(w, t int) (fioResult, error)) ([][][]fioResult, error) {
	res := make([][][]fioResult, nw)
	for w := range res {
		res[w] = make([][]fioResult, nt)
	}
	for round := range rounds {
		for w := range nw {
			for k := range nt {
				t := (k + round + w) % nt
				r, err := job(w, t)
				if err != nil {
					return nil, err
				}
				res[w][t] = append(res[w][t], r)
			}
		}
	}
	return res, nil
}

// fioResult is what one fio run measured for its direction.
type fioResult struct {
	iops   float64
	bwKiB  float64       // KiB/s
	clat   time.Duration // mean completion latency
	clat50 time.Duration // median completion latency
}

// throughput is the figure a workload is compared by.
func (r fioResult) throughput(w workload) float64 {
	if w.seq {
		return r.bwKiB
	}
	return r.iops
}

// fioJob runs one fio job with direct I/O on file (a regular file or a
// block device) over its first size bytes and returns its result. ramp is
// excluded from the figures; runtime is measured.
func fioJob(ctx context.Context, file string, size int64, w workload, ramp, runtime time.Duration) (fioResult, error) {
	args := []string{
		"--name=bench", "--filename=" + file, "--direct=1", "--ioengine=libaio",
		"--rw=" + w.rw, "--bs=" + w.bs, "--iodepth=" + strconv.Itoa(w.depth),
		"--size=" + strconv.FormatInt(size, 10),
		"--runtime=" + strconv.Itoa(int(runtime.Seconds())) + "s",
		// The same offsets every run: target and plain file see the same
		// access pattern, round after round.
		"--randrepeat=1", "--norandommap", "--output-format=json",
	}
	switch {
	case w.buffered && w.seq:
		// One pass at most, from a cold cache (fio's --invalidate, on by
		// default, drops the file's pages first): a time-based run would
		// wrap around and read the second pass from the page cache.
		args[2], args[3] = "--direct=0", "--ioengine=psync"
	case w.buffered:
		args[2], args[3] = "--direct=0", "--ioengine=psync"
		args = append(args, "--time_based")
	default:
		args = append(args, "--time_based", "--ramp_time="+strconv.Itoa(int(ramp.Seconds()))+"s")
	}
	out, err := runFio(ctx, args)
	if err != nil {
		return fioResult{}, err
	}
	return parseFio(out, strings.Contains(w.rw, "write"))
}

// fioFill writes the first size bytes of file sequentially with direct
// I/O, so that every later read hits allocated blocks at every layer (a
// read of a hole costs nothing on the plain file but goes through the
// loop device on a volume) and every later write overwrites.
func fioFill(ctx context.Context, file string, size int64) error {
	_, err := runFio(ctx, []string{"--name=fill", "--filename=" + file, "--direct=1", "--ioengine=libaio",
		"--rw=write", "--bs=1m", "--iodepth=8", "--size=" + strconv.FormatInt(size, 10), "--output-format=json"})
	return err
}

func runFio(ctx context.Context, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "fio", args...)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/sbin:/sbin:/usr/bin:/bin"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("fio %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// fioJSON is the part of fio's --output-format=json that is read.
type fioJSON struct {
	Jobs []struct {
		Read  fioDir `json:"read"`
		Write fioDir `json:"write"`
	} `json:"jobs"`
}

type fioDir struct {
	IOPS float64 `json:"iops"`
	BW   float64 `json:"bw"` // KiB/s
	Clat struct {
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

func parseFio(out []byte, write bool) (fioResult, error) {
	// fio may print notices before the JSON document.
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var j fioJSON
	if err := json.Unmarshal(out, &j); err != nil {
		return fioResult{}, fmt.Errorf("fio output: %w", err)
	}
	if len(j.Jobs) != 1 {
		return fioResult{}, fmt.Errorf("fio output: %d jobs, want 1", len(j.Jobs))
	}
	d := j.Jobs[0].Read
	if write {
		d = j.Jobs[0].Write
	}
	if d.IOPS == 0 {
		return fioResult{}, fmt.Errorf("fio output: no I/O done")
	}
	return fioResult{iops: d.IOPS, bwKiB: d.BW, clat: time.Duration(d.Clat.Mean),
		clat50: time.Duration(d.Clat.Percentile["50.000000"])}, nil
}
