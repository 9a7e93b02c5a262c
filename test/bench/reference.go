package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// refDriver is one side of the CreateVolume comparison.
type refDriver struct {
	name   string
	socket string
	d      *driverProc
	serial []time.Duration // every serial sample, all rounds
	// roundP50 and roundRate are per round: serial p50 and the creates/s
	// of the concurrent block.
	roundP50  []time.Duration
	roundRate []float64
}

// reference compares CreateVolume with csi-driver-host-path's
// hostpathplugin, the CSI community's reference driver, started beside
// filevol on the same filesystem. Every round runs, for each driver in
// turn (who goes first alternates), a serial block and a block of
// cfg.clients concurrent clients, then deletes what the round created
// (untimed), so both drivers always start a block from an empty pool: the
// reference rewrites one state file holding every volume on each create,
// and would otherwise slow down as it fills. Its state file is written
// without fsync; filevol's records are durable when CreateVolume returns.
func (b *bench) reference(ctx context.Context) error {
	// On the pool's filesystem, as filevol's records are.
	stateDir := filepath.Join(filepath.Dir(b.poolDir), "hostpath-state")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	refSock := filepath.Join(b.runDir, "hostpath.sock")
	ref, err := startProc(ctx, []string{b.cfg.referenceBin, "--endpoint", "unix://" + refSock, "--nodeid", "bench",
		"--statedir", stateDir, "--drivername", "hostpath.csi.k8s.io"}, refSock, filepath.Join(b.runDir, "hostpath.log"), nil)
	if err != nil {
		return fmt.Errorf("reference driver: %w", err)
	}
	defer func() {
		if _, _, err := ref.stop(); err != nil {
			b.rep.note("reference driver stop: %v", err)
		}
	}()
	sides := []*refDriver{{name: "filevol", socket: b.socket, d: b.d}, {name: "hostpath", socket: refSock, d: ref}}
	b.rep.machine = append(b.rep.machine, "Load average before the reference comparison: "+loadAvg())
	for _, s := range sides { // warm both up: connections, caches
		ids, err := serialCreates(ctx, s.d.ctrl, "warm", warmup, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if err := deleteAll(ctx, s.socket, b.cfg.clients, ids); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	floor, err := newCreateFloor(filepath.Join(filepath.Dir(b.poolDir), "ref-floor"))
	if err != nil {
		return err
	}
	defer floor.close()
	start := time.Now()
	for round := range b.cfg.refRounds {
		for k := range sides {
			s := sides[(k+round)%len(sides)]
			if err := b.referenceRound(ctx, s, round); err != nil {
				return fmt.Errorf("%s round %d: %w", s.name, round, err)
			}
		}
		if err := floor.block(b.cfg.refBlock); err != nil {
			return fmt.Errorf("durable create floor: %w", err)
		}
	}
	fp := summarize(floor.lats).p50
	b.rep.info("R1", "The pool's durable create sequence alone (no driver, no gRPC: write+fsync a record, rename, fsync the directory), p50, in the same rounds",
		fmt.Sprintf("%s = %.2f × hostpath's CreateVolume p50", ms(fp), float64(fp)/float64(summarize(sides[1].serial).p50)))
	b.rep.detail("Reference comparison run", "%d rounds × (%d serial + %d with %d clients) creates per driver, in %s; load average after: %s",
		b.cfg.refRounds, b.cfg.refBlock, 4*b.cfg.refBlock, b.cfg.clients, time.Since(start).Round(time.Second), loadAvg())
	b.reportReference(sides[0], sides[1])
	return nil
}

// referenceRound is one round of one driver: the serial block, the
// concurrent block, then the deletes.
func (b *bench) referenceRound(ctx context.Context, s *refDriver, round int) error {
	var lats []time.Duration
	ids, err := serialCreates(ctx, s.d.ctrl, fmt.Sprintf("ref-s%d", round), b.cfg.refBlock, &lats)
	if err != nil {
		return err
	}
	s.serial = append(s.serial, lats...)
	s.roundP50 = append(s.roundP50, summarize(lats).p50)
	cs, closeAll, err := clientsOf(s.socket, b.cfg.clients)
	if err != nil {
		return err
	}
	defer closeAll()
	tp, wall, _, err := createMany(ctx, cs, fmt.Sprintf("ref-c%d", round), 4*b.cfg.refBlock)
	if err != nil {
		return err
	}
	s.roundRate = append(s.roundRate, rate(len(tp), wall))
	return deleteAll(ctx, s.socket, b.cfg.clients, append(ids, tp...))
}

func (b *bench) reportReference(fv, ref *refDriver) {
	p50f, p50r := summarize(fv.serial).p50, summarize(ref.serial).p50
	p50Ratios := make([]float64, len(fv.roundP50))
	rateRatios := make([]float64, len(fv.roundRate))
	for i := range fv.roundP50 {
		p50Ratios[i] = float64(fv.roundP50[i]) / float64(ref.roundP50[i])
		rateRatios[i] = fv.roundRate[i] / ref.roundRate[i]
	}
	med, lo, hi := spread(p50Ratios)
	b.rep.target("R1", "CreateVolume serial p50, filevol ÷ hostpath (per-round ratio, median and spread)",
		fmt.Sprintf("%.2f (%.2f–%.2f); all samples: %s vs %s", med, lo, hi, ms(p50f), ms(p50r)), "≤ 1.00", med <= 1)
	med, lo, hi = spread(rateRatios)
	b.rep.target("R2", fmt.Sprintf("CreateVolume throughput with %d clients, filevol ÷ hostpath", b.cfg.clients),
		fmt.Sprintf("%.2f (%.2f–%.2f)", med, lo, hi), "≥ 3.00", med >= 3)
	for _, s := range []*refDriver{fv, ref} {
		b.rep.detail("Reference comparison, "+s.name, "serial %s; per-round p50 %v; %d-client creates/s per round %v",
			summarize(s.serial), roundMs(s.roundP50), b.cfg.clients, roundRates(s.roundRate))
	}
}

// serialCreates creates n volumes one after the other, appending each
// call's latency to lats when it is not nil.
func serialCreates(ctx context.Context, c csipb.ControllerClient, prefix string, n int, lats *[]time.Duration) ([]string, error) {
	ids := make([]string, 0, n)
	for i := range n {
		t := time.Now()
		id, err := create(ctx, c, fmt.Sprintf("%s-%06d", prefix, i))
		if lats != nil {
			*lats = append(*lats, time.Since(t))
		}
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// deleteAll deletes ids on the driver at socket with n clients.
func deleteAll(ctx context.Context, socket string, n int, ids []string) error {
	cs, closeAll, err := clientsOf(socket, n)
	if err != nil {
		return err
	}
	defer closeAll()
	_, _, err = parallel(ctx, cs, len(ids), func(ctx context.Context, c csipb.ControllerClient, i int) error {
		return deleteVolume(ctx, c, ids[i])
	})
	return err
}

func roundMs(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

func roundRates(rs []float64) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%.0f", r)
	}
	return out
}

// createFloor times the pool's durable create sequence on bare syscalls
// (poolCreateSequence) in the reference comparison's rounds: what a
// CreateVolume whose record survives a crash cannot go below on this disk,
// whatever the driver does.
type createFloor struct {
	dir  string
	dfd  int
	next int
	lats []time.Duration
}

func newCreateFloor(dir string) (*createFloor, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &createFloor{dir: dir, dfd: dfd}, nil
}

func (f *createFloor) block(n int) error {
	record := []byte(strings.Repeat("x", 300)) // about a record's size
	for range n {
		t := time.Now()
		if err := poolCreateSequence(f.dir, f.dfd, f.next, record); err != nil {
			return err
		}
		f.lats = append(f.lats, time.Since(t))
		f.next++
	}
	return nil
}

func (f *createFloor) close() { unix.Close(f.dfd) }
