package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// ioTarget is one thing fio runs on: a published volume or the plain file.
type ioTarget struct {
	name, file string
	// id, staging and target are set for a volume (empty for the plain file).
	id, staging, target string
	block               bool
}

// dataPath is the data-path comparison: fio with direct I/O on a published
// ext4 and xfs mount volume, a published block volume, and a plain file on
// the pool's filesystem, interleaved job by job in every round so that the
// machine's load falls on all of them alike. Each volume's figure is
// reported as a ratio to the plain file's in the same round.
func (b *bench) dataPath(ctx context.Context) error {
	if b.cfg.fioRounds == 0 {
		return nil
	}
	if b.cfg.fioAB != "" {
		return b.dataPathAB(ctx)
	}
	size := b.cfg.fioSize
	plain := ioTarget{name: "plain file", file: filepath.Join(filepath.Dir(b.poolDir), "plain.fio")}
	targets := []ioTarget{plain}
	defer func() { b.teardownIOTargets(targets[1:]) }()
	for _, v := range []struct{ name, fs string }{{"ext4 mount", "ext4"}, {"xfs mount", "xfs"}, {"block", ""}} {
		t, err := b.publishIOTarget(ctx, v.name, v.fs, size)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	b.rep.machine = append(b.rep.machine, "Load average before the data path: "+loadAvg())
	for _, t := range targets {
		if err := fioFill(ctx, t.file, size); err != nil {
			return fmt.Errorf("fill %s: %w", t.name, err)
		}
		if t.id != "" {
			b.rep.detail("Data path: "+t.name+" device", "%s", deviceFacts(t.file))
		}
	}
	start := time.Now()
	res, err := interleaved(b.cfg.fioRounds, len(workloads), len(targets), func(w, ti int) (fioResult, error) {
		r, err := fioJob(ctx, targets[ti].file, size, workloads[w], time.Second, b.cfg.fioRuntime)
		if err != nil {
			return r, fmt.Errorf("%s on %s: %w", workloads[w].name, targets[ti].name, err)
		}
		return r, nil
	})
	if err != nil {
		return err
	}
	b.rep.detail("Data path run", "%d rounds × %d workloads × %d targets, %s + 1 s ramp each, %d MiB per target, in %s; load average after: %s",
		b.cfg.fioRounds, len(workloads), len(targets), b.cfg.fioRuntime, size>>20, time.Since(start).Round(time.Second), loadAvg())
	b.reportDataPath(targets, res)
	return nil
}

// reportDataPath adds, per workload and volume, the median of the per-round
// ratios to the plain file and their spread (min–max), and for queue depth
// 1 the ratio of mean completion latencies.
func (b *bench) reportDataPath(targets []ioTarget, res [][][]fioResult) {
	for w, wl := range workloads {
		plain := res[w][0]
		unit, scale := "IOPS", 1.0
		if wl.seq {
			unit, scale = "MiB/s", 1.0/1024
		}
		b.rep.detail("Data path, plain file: "+wl.name, "%s %s; mean clat %s (per round: %s)", unit,
			fmtMedian(plain, func(r fioResult) float64 { return r.throughput(wl) * scale }),
			ms(medianDur(plain, func(r fioResult) time.Duration { return r.clat })), fmtRounds(plain, wl, scale))
		for t := 1; t < len(targets); t++ {
			ratios := make([]float64, len(plain))
			for i := range plain {
				ratios[i] = res[w][t][i].throughput(wl) / plain[i].throughput(wl)
			}
			med, lo, hi := spread(ratios)
			b.rep.target("D", fmt.Sprintf("%s, %s: %s vs the plain file", wl.name, targets[t].name, unit),
				fmt.Sprintf("%.1f %% (%.1f–%.1f)", 100*med, 100*lo, 100*hi), "≥ 95 %", med >= 0.95)
			if wl.depth == 1 {
				lat := make([]float64, len(plain))
				for i := range plain {
					lat[i] = float64(res[w][t][i].clat) / float64(plain[i].clat)
				}
				med, lo, hi := spread(lat)
				b.rep.target("D", fmt.Sprintf("%s, %s: mean latency vs the plain file", wl.name, targets[t].name),
					fmt.Sprintf("%.1f %% (%.1f–%.1f)", 100*med, 100*lo, 100*hi), "≤ 110 %", med <= 1.10)
			}
			b.rep.detail("Data path, "+targets[t].name+": "+wl.name, "%s; mean clat %s (per round: %s)", unit,
				ms(medianDur(res[w][t], func(r fioResult) time.Duration { return r.clat })), fmtRounds(res[w][t], wl, scale))
		}
	}
}

// publishIOTarget creates, stages and publishes a volume of fsType ("" for
// a block volume) big enough for size bytes of fio data plus the
// filesystem's own, and returns the file fio is to use in it.
func (b *bench) publishIOTarget(ctx context.Context, name, fsType string, size int64) (ioTarget, error) {
	return b.publishIOTargetOf(ctx, name, fsType, size, nil, nil)
}

// publishIOTargetOf is publishIOTarget for a volume of a class with
// params, staged with the node-stage secrets (an encrypted one).
func (b *bench) publishIOTargetOf(ctx context.Context, name, fsType string, size int64, params, secrets map[string]string) (ioTarget, error) {
	vc := &csipb.VolumeCapability{AccessMode: capability.AccessMode}
	if fsType == "" {
		vc.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	} else {
		vc.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType}}
	}
	pv := "io-" + strings.ReplaceAll(name, " ", "-")
	t := ioTarget{name: name, block: fsType == "",
		staging: filepath.Join(b.kubeletDir(), "plugins/kubernetes.io/csi/filevol.csi.io", pv, "globalmount"),
		target:  filepath.Join(b.kubeletDir(), "pods", pv, "volumes/kubernetes.io~csi", pv, "mount")}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := b.d.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: pv, Parameters: params,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size + size/4 + 512<<20}, VolumeCapabilities: []*csipb.VolumeCapability{vc}})
	if err != nil {
		return t, fmt.Errorf("CreateVolume %s: %w", pv, err)
	}
	t.id = resp.GetVolume().GetVolumeId()
	if _, err := b.d.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: t.id, StagingTargetPath: t.staging, VolumeCapability: vc, Secrets: secrets}); err != nil {
		return t, fmt.Errorf("NodeStageVolume %s: %w", pv, err)
	}
	if _, err := b.d.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: t.id, StagingTargetPath: t.staging,
		TargetPath: t.target, VolumeCapability: vc}); err != nil {
		return t, fmt.Errorf("NodePublishVolume %s: %w", pv, err)
	}
	t.file = t.target
	if !t.block {
		t.file = filepath.Join(t.target, "fio.data")
	}
	return t, nil
}

// teardownIOTargets unpublishes, unstages and deletes the volumes (best
// effort: cleanup checks that nothing is left).
func (b *bench) teardownIOTargets(ts []ioTarget) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for _, t := range ts {
		if t.id == "" || b.d == nil {
			continue
		}
		_, err1 := b.d.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: t.id, TargetPath: t.target})
		_, err2 := b.d.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: t.id, StagingTargetPath: t.staging})
		err3 := deleteVolume(ctx, b.d.ctrl, t.id)
		for _, err := range []error{err1, err2, err3} {
			if err != nil {
				b.rep.note("data path teardown of %s: %v", t.name, err)
			}
		}
	}
	_ = os.Remove(filepath.Join(filepath.Dir(b.poolDir), "plain.fio"))
}

// deviceFacts reads, for the loop device under file (the device itself
// or the filesystem holding it), the settings the data path depends on.
func deviceFacts(file string) string {
	sys, st, err := deviceSysfs(file)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, a := range []string{"loop/dio", "queue/logical_block_size", "queue/scheduler", "queue/nr_requests", "queue/read_ahead_kb", "queue/rotational"} {
		v, err := os.ReadFile(filepath.Join(sys, a))
		s := strings.TrimSpace(string(v))
		if err != nil {
			s = "?"
		}
		parts = append(parts, filepath.Base(a)+" "+s)
	}
	if m, err := mountOf(file); err == nil && st.Mode&unix.S_IFMT != unix.S_IFBLK {
		parts = append(parts, "mount "+m.Source+" "+m.FSType+" "+m.Options+","+m.VFSOptions)
	}
	return strings.Join(parts, ", ")
}

// deviceSysfs returns the sysfs directory of the block device under file
// (the device itself, or the one holding the filesystem file is on).
func deviceSysfs(file string) (string, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return "", st, err
	}
	dev := st.Dev
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		dev = st.Rdev
	}
	return fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev)), st, nil
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// spread returns the median, minimum and maximum of xs.
func spread(xs []float64) (med, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

func fmtMedian(rs []fioResult, f func(fioResult) float64) string {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	med, _, _ := spread(xs)
	return fmt.Sprintf("%.0f", med)
}

func medianDur(rs []fioResult, f func(fioResult) time.Duration) time.Duration {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = float64(f(r))
	}
	med, _, _ := spread(xs)
	return time.Duration(med)
}

func fmtRounds(rs []fioResult, wl workload, scale float64) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%.0f", r.throughput(wl)*scale))
	}
	return strings.Join(parts, ", ")
}
