// Command bench measures a real filevol driver process over its CSI socket
// against the performance targets of the issue: CreateVolume latency and
// throughput, create→stage→publish latency, driver memory and ListVolumes
// latency. It starts bin/filevol itself on a fresh pool under
// /tmp/filevol-bench/<run>, prints a markdown report and writes it to --out.
//
// Targets are reported (PASS/MISS), never asserted: the exit code is
// non-zero only when the harness itself fails (a call errors, the driver
// does not start, cleanup leaves something behind).
//
// Run it as root (loop devices, mounts) through `make bench`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/testutil"
)

// benchRoot holds every run's pool, sockets and mounts. It is on the same
// filesystem as the real pool would be (/var/lib), not a tmpfs.
const benchRoot = "/tmp/filevol-bench"

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin/filevol", "driver binary to start")
	flag.StringVar(&c.out, "out", "_output/bench/report.md", "markdown report to write (the driver log goes beside it)")
	flag.IntVar(&c.iterations, "iterations", 1000, "serial CreateVolume calls timed (target 1)")
	flag.IntVar(&c.clients, "clients", 8, "concurrent clients for the throughput run (target 2)")
	flag.IntVar(&c.concurrent, "throughput-creates", 4000, "volumes created by the concurrent clients together (target 2)")
	flag.IntVar(&c.lifecycle, "lifecycle", 30, "create→stage→publish iterations (target 3)")
	flag.IntVar(&c.volumes, "volumes", 1000, "volumes in the pool for the memory and ListVolumes figures (targets 4, 5)")
	flag.IntVar(&c.listIterations, "list-iterations", 50, "ListVolumes listings timed per page size (target 5)")
	flag.IntVar(&c.verbosity, "driver-v", 0, "klog verbosity of the driver (--v); above 2 logs every call and skews latency")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the harness (client side) to this file")
	flag.StringVar(&c.poolFS, "pool-fs", "host", "pool filesystem: host (/tmp as it is), or ext4, ext4-nojournal, xfs, tmpfs made for the run (to compare)")
	flag.Func("driver-env", "K=V added to the driver's environment (repeatable), e.g. GOMAXPROCS=1", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q is not K=V", v)
		}
		c.driverEnv = append(c.driverEnv, v)
		return nil
	})
	flag.DurationVar(&c.settle, "settle", recentlyFreedFor, "on ext4 without a journal, wait this long after the last run ended before measuring (its freed inodes slow every create meanwhile; 0: do not wait)")
	flag.StringVar(&c.only, "only", "", "run one part only: control (create, lifecycle, memory, listing), datapath (fio, with the encryption A/B), encryption (fio on an encrypted and a plain ext4 volume, A B A B), reference (CreateVolume vs --reference-bin), scale (--scale-volumes on one node), cbt (SnapshotMetadata on xfs and btrfs pools, against --reference-bin when set), tree-delete (a directory volume of --tree-files files deleted while other calls run, on btrfs and ext4 directory pools) or sharedfs (shared image pools on CephFS, GlusterFS and a local xfs: create, attach+stage, fio with the loop device's direct I/O on and off, --fio-rounds interleaved rounds); empty: control, datapath and reference (when --reference-bin is set)")
	flag.IntVar(&c.fioRounds, "fio-rounds", 3, "data path: interleaved rounds of every fio workload on every target (0: skip the data path)")
	flag.Int64Var(&c.fioSize, "fio-size", 512<<20, "data path: bytes of each target fio works on (written once before the rounds)")
	flag.DurationVar(&c.fioRuntime, "fio-runtime", 4*time.Second, "data path: measured time of one fio job (after a 1 s ramp)")
	flag.StringVar(&c.fioAB, "fio-ab", "", "data path: instead of the usual comparison, A/B one loop device setting against the plain file: scheduler (none vs mq-deadline, direct I/O) or read-ahead (read_ahead_kb 0/128/2560, buffered reads)")
	flag.StringVar(&c.referenceBin, "reference-bin", "", "csi-driver-host-path's hostpathplugin binary: compare CreateVolume with it, interleaved (docs/data-path.md says how to build it)")
	flag.IntVar(&c.refRounds, "reference-rounds", 6, "reference comparison: rounds, each driver's serial and 8-client blocks alternating")
	flag.IntVar(&c.refBlock, "reference-block", 200, "reference comparison: creates per driver per round and mode")
	flag.IntVar(&c.scaleVolumes, "scale-volumes", 1000, "scale: volumes created, staged and published on the one node (make scale)")
	flag.IntVar(&c.treeFiles, "tree-files", 1000000, "tree delete: files written into the directory volume that is deleted")
	flag.IntVar(&c.treeWidth, "tree-width", 1000, "tree delete: files per directory (--tree-files for one flat directory)")
	flag.StringVar(&c.treeFS, "tree-fs", "btrfs,ext4", "tree delete: the directory pools' filesystems, comma-separated (btrfs, ext4)")
	flag.IntVar(&c.cbtGiB, "cbt-gib", 64, "changed-block tracking: GiB of filevol's thin block volume")
	flag.IntVar(&c.cbtRefGiB, "cbt-ref-gib", 0, "changed-block tracking: GiB of the reference's volume (0: --cbt-gib); it reads both snapshots whole")
	flag.IntVar(&c.cbtRounds, "cbt-rounds", 3, "changed-block tracking: rounds of GetMetadataDelta and GetMetadataAllocated per driver and case")
	flag.StringVar(&c.cbtFS, "cbt-fs", "xfs,btrfs", "changed-block tracking: the pools' filesystems, comma-separated (xfs, btrfs, ext4)")
	flag.StringVar(&c.cbtChanges, "cbt-changes", "1,10", "changed-block tracking: the cases, % of the volume's 4 KiB blocks changed between two snapshots, comma-separated")
	flag.Float64Var(&c.cbtSame, "cbt-same", 0.05, "changed-block tracking: share of the changed blocks rewritten with the bytes they held")
	flag.IntVar(&c.sharedLifecycle, "sharedfs-lifecycle", 3, "sharedfs: volumes created, attached, staged and deleted per pool in each of --fio-rounds rounds")
	flag.BoolVar(&c.keep, "keep", false, "leave the run directory (pool, driver log) in place after the run")
	flag.Parse()
	if c.iterations < 1 || c.clients < 1 || c.concurrent < 1 || c.lifecycle < 1 || c.volumes < 1 || c.listIterations < 1 ||
		c.fioRounds < 0 || c.fioSize < 1<<20 || c.fioRuntime < time.Second || c.refRounds < 1 || c.refBlock < 1 || c.scaleVolumes < 1 || c.treeFiles < 1 || c.treeWidth < 1 ||
		c.cbtGiB < 1 || c.sharedLifecycle < 1 || c.cbtRefGiB < 0 || c.cbtRounds < 1 || c.cbtSame < 0 || c.cbtSame > 1 {
		fmt.Fprintln(os.Stderr, "bench: every count must be at least 1 (--fio-rounds at least 0, --fio-size at least 1 MiB, --fio-runtime at least 1 s)")
		os.Exit(2)
	}
	if !slices.Contains([]string{"", "control", "datapath", "encryption", "reference", "scale", "tree-delete", "cbt", "sharedfs"}, c.only) {
		fmt.Fprintf(os.Stderr, "bench: --only %q: want control, datapath, encryption, reference, scale, cbt, tree-delete or sharedfs\n", c.only)
		os.Exit(2)
	}
	if !slices.Contains([]string{"", "scheduler", "read-ahead"}, c.fioAB) {
		fmt.Fprintf(os.Stderr, "bench: --fio-ab %q: want scheduler or read-ahead\n", c.fioAB)
		os.Exit(2)
	}
	if c.only == "reference" && c.referenceBin == "" {
		fmt.Fprintln(os.Stderr, "bench: --only reference needs --reference-bin")
		os.Exit(2)
	}
	os.Exit(run(c))
}

func run(c config) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: needs root (loop devices and mounts); run `sudo make bench`")
		return 1
	}
	bin, err := filepath.Abs(c.bin)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: driver binary: %v (run `make build`)\n", err)
		return 1
	}
	c.bin = bin
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	unlock, err := lockRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer unlock()
	// What a killed earlier run left (mounts, loop devices, files) goes
	// first; the lock guarantees no live run owns it.
	if err := testutil.CleanLeftovers(benchRoot); err != nil {
		fmt.Fprintf(os.Stderr, "bench: cleaning leftovers of an earlier run under %s: %v\n", benchRoot, err)
		return 1
	}
	b := newBench(c)
	loopsBefore := loopNumbers()
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	err = os.MkdirAll(b.runDir, 0o700)
	if err == nil {
		err = b.preparePoolFS(ctx)
	}
	if err == nil {
		err = b.settle(ctx)
	}
	if err == nil {
		b.rep.machine = machineFacts(b.poolDir)
		err = b.all(ctx)
	}
	if err != nil {
		b.rep.aborted = err
	}
	if cerr := b.cleanup(); cerr != nil {
		b.rep.note("cleanup: %v", cerr)
		err = errors.Join(err, cerr)
	}
	if n := removeNewLoops(loopsBefore); n > 0 {
		b.rep.note("cleanup: removed %d empty loop devices the kernel made for this run", n)
	}
	recordRunEnd()
	md := b.rep.markdown()
	fmt.Print(md)
	if werr := os.WriteFile(c.out, []byte(md), 0o644); werr != nil {
		err = errors.Join(err, werr)
	} else {
		fmt.Fprintf(os.Stderr, "bench: report written to %s, driver log %s\n", c.out, b.logPath)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		return 1
	}
	return 0
}

// all runs the phases in an order that keeps each measurement's pool state
// well defined: latency on a small pool, then the filled pool for memory
// and listing, then a restart on the filled pool, then cleanup.
func (b *bench) all(ctx context.Context) error {
	b.rep.settings = fmt.Sprintf("--only %q, %d serial creates, %d clients × %d creates, %d lifecycle iterations, %d volumes, %d listings, driver --v %d, --pool-fs %s, driver env %v, %d fio rounds of %s on %d MiB, reference %q (%d rounds × %d), %d scale volumes, %d files in the tree deleted (%d per directory, on %s), changed-block tracking %d GiB (reference %d GiB) on %s, %s %% changed, %d rounds, %.0f %% same-bytes rewrites",
		b.cfg.only, b.cfg.iterations, b.cfg.clients, b.cfg.concurrent, b.cfg.lifecycle, b.cfg.volumes, b.cfg.listIterations, b.cfg.verbosity, b.cfg.poolFS, b.cfg.driverEnv,
		b.cfg.fioRounds, b.cfg.fioRuntime, b.cfg.fioSize>>20, b.cfg.referenceBin, b.cfg.refRounds, b.cfg.refBlock, b.cfg.scaleVolumes, b.cfg.treeFiles, b.cfg.treeWidth, b.cfg.treeFS,
		b.cfg.cbtGiB, b.cbtRefGiB(), b.cfg.cbtFS, b.cfg.cbtChanges, b.cfg.cbtRounds, 100*b.cfg.cbtSame)
	if b.cfg.only == "" || b.cfg.only == "control" {
		b.fsyncProbe()
	}
	if b.cfg.only == "scale" {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		b.httpAddr = addr
		// The sweep at every start is the one measured; none in between.
		b.driverArgs = []string{"--http-endpoint", addr, "--gc-interval", "24h"}
	}
	if err := b.start(ctx); err != nil {
		return err
	}
	info, err := b.d.ident.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		return fmt.Errorf("GetPluginInfo: %w", err)
	}
	// The binary changes under the bench while others work: say which one ran.
	st, _ := os.Stat(b.cfg.bin)
	b.rep.machine = append(b.rep.machine, fmt.Sprintf("Driver: %s %s, version %s, %.1f MB binary built %s",
		b.cfg.bin, info.GetName(), info.GetVendorVersion(), float64(st.Size())/1e6, st.ModTime().Format(time.TimeOnly)))
	m, err := b.d.memory()
	if err != nil {
		return err
	}
	b.rep.target("4a", "Driver VmRSS, idle right after start", fmt.Sprintf("%.1f MiB", m.mb()), "≤ 30 MiB", m.mb() <= 30)
	b.rep.detail("Driver memory, idle right after start, empty pool", "%s", m)
	b.rep.detail("Driver start to first Probe answered, empty pool", "%s", ms(b.d.ready))
	for _, phase := range b.phases() {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	if b.d == nil {
		return nil // a phase stopped it (tree-delete runs drivers of its own)
	}
	return b.stopDriver("final stop")
}

// phases are the parts --only selects, in the order they run.
func (b *bench) phases() []func(context.Context) error {
	control := []func(context.Context) error{
		b.serialCreate, b.throughput, b.deleteCreated, b.lifecycle, b.fill, b.list, b.restart, b.deleteAll,
	}
	switch b.cfg.only {
	case "control":
		return control
	case "datapath":
		return []func(context.Context) error{b.dataPath, b.dataPathCrypt}
	case "encryption":
		return []func(context.Context) error{b.dataPathCrypt}
	case "reference":
		return []func(context.Context) error{b.reference}
	case "scale":
		return []func(context.Context) error{b.scale}
	case "tree-delete":
		return []func(context.Context) error{b.treeDelete}
	case "cbt":
		return []func(context.Context) error{b.cbt}
	case "sharedfs":
		return []func(context.Context) error{b.sharedFS}
	}
	all := append([]func(context.Context) error{b.dataPath, b.dataPathCrypt}, control...)
	if b.cfg.referenceBin != "" {
		all = append(all, b.reference)
	}
	return all
}

func (b *bench) start(ctx context.Context) error {
	d, err := startDriver(ctx, b.cfg.bin, b.socket, b.poolDir, b.kubeletDir(), b.logPath, b.cfg.verbosity, b.cfg.driverEnv, b.driverArgs...)
	if err != nil {
		return err
	}
	b.d = d
	return nil
}

// stopDriver stops the driver with SIGTERM and reports its exit: kubelet
// and the DaemonSet rely on a clean exit 0.
func (b *bench) stopDriver(when string) error {
	d := b.d
	b.d = nil
	code, took, err := d.stop()
	if err != nil {
		b.rep.target("6", "Driver exit on SIGTERM ("+when+")", err.Error(), "exit 0", false)
		return nil // reported, and the driver is gone: the run goes on
	}
	b.rep.target("6", "Driver exit on SIGTERM ("+when+")", fmt.Sprintf("exit %d after %s", code, ms(took)), "exit 0", code == 0)
	return nil
}

// cleanup stops a driver still running (an aborted run), checks that
// nothing is left mounted or attached under the run directory and removes
// it (unless --keep).
func (b *bench) cleanup() error {
	if b.d != nil {
		_ = b.stopDriver("after abort")
	}
	left, err := leftovers(b.runDir)
	if err == nil && left != "" {
		err = fmt.Errorf("left behind after the driver stopped: %s", left)
	}
	if b.cfg.keep {
		b.rep.note("run directory kept: %s", b.runDir)
		return err
	}
	// Copy the driver log out of the run directory before it goes.
	if data, rerr := os.ReadFile(b.logPath); rerr == nil {
		_ = os.WriteFile(filepath.Join(filepath.Dir(b.cfg.out), "driver.log"), data, 0o644)
		b.logPath = filepath.Join(filepath.Dir(b.cfg.out), "driver.log")
	}
	return errors.Join(err, testutil.CleanLeftovers(b.runDir))
}

// kubeletDir stands for /var/lib/kubelet: the lifecycle's staging and
// target paths are laid out inside it as kubelet lays them out.
func (b *bench) kubeletDir() string { return filepath.Join(b.runDir, "kubelet") }

func newBench(c config) *bench {
	now := time.Now()
	runDir := filepath.Join(benchRoot, now.Format("20060102-150405"))
	return &bench{
		cfg: c, rep: &report{started: now},
		runDir: runDir, poolDir: filepath.Join(runDir, "pool"),
		socket: filepath.Join(runDir, "csi.sock"), logPath: filepath.Join(runDir, "driver.log"),
	}
}

// bench is one run: its configuration, directories, driver and report.
type bench struct {
	cfg                              config
	rep                              *report
	runDir, poolDir, socket, logPath string
	d                                *driverProc
	// serialIDs and tpIDs are the volumes of the create phases, deleted
	// together once both have measured.
	serialIDs, tpIDs []string
	// seqP50 is what the pool's create sequence costs on this disk
	// without the driver (fsyncProbe): the floor under target 1.
	seqP50 time.Duration
	// rss1k is the largest VmRSS seen while the pool held cfg.volumes volumes.
	rss1k memory
	// driverArgs are added to the driver's command line (the scale part
	// serves /metrics and /debug/volumes).
	driverArgs []string
	httpAddr   string
}
