package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/internal/testutil/gluster"
)

// sharedPool is one shared image pool of the sharedfs part: its
// filesystem, its filevol (controller and node in one process, as
// csi-sanity's shared-pool suites run it) and what was measured on it.
type sharedPool struct {
	name, key        string // as reported; in file names
	dir, kubelet     string
	d                *driverProc
	logPath          string
	create, attach   []time.Duration // CreateVolume; ControllerPublishVolume + NodeStageVolume
	release          []time.Duration // NodeUnstageVolume + ControllerUnpublishVolume + DeleteVolume
	vol              ioTarget        // the data path's volume, staged and published
	loopDev, dioWhat string          // its loop device; what sysfs said of it as staged
}

// sharedFS compares shared image pools on CephFS (ceph-fuse, the
// harness's cluster), on GlusterFS (its harness) and on a local xfs made
// on a loop device, through each pool's own filevol over gRPC: volume
// create, attach and stage, and fio in a staged volume with its loop
// device's direct I/O on and off. Everything is interleaved: every
// round runs each case on each pool in turn (order rotated), never all
// of one pool and then the next.
func (b *bench) sharedFS(ctx context.Context) error {
	if b.cfg.fioRounds < 1 {
		return fmt.Errorf("--only sharedfs needs --fio-rounds of at least 1")
	}
	return withHarness("sharedfs-bench", func(tb testing.TB) error {
		begin := time.Now()
		local, undo, err := b.runFS(ctx, "localfs", "xfs", poolFSSize)
		if err != nil {
			return err
		}
		var pools []*sharedPool
		defer func() {
			b.stopSharedPools(pools)
			if err := undo(); err != nil {
				b.rep.note("local xfs: %v", err)
			}
		}()
		g := gluster.Start(tb, gluster.Options{Set: gluster.SharedPoolSettings})
		gmnt := g.MountNode(tb, "bench", gluster.CoherentClientArgs...)
		c := ceph.Start(tb)
		cmnt := c.MountNode(tb, "bench")
		// A new cluster's statfs says 0 bytes free until the OSD's first
		// report reaches the monitor; the pool would refuse every create.
		waitBegin := time.Now()
		c.WaitForRoom(tb)
		waited := time.Since(waitBegin)
		b.rep.detail("Shared filesystems up", "GlusterFS in %s, Ceph in %s (harness starts, slots swept), its statfs showing free space %s later, %s in all",
			g.StartDuration.Round(time.Millisecond), c.StartDuration.Round(time.Millisecond), waited.Round(time.Millisecond), time.Since(begin).Round(time.Second))
		for _, p := range []struct {
			name, key, mnt string
			extra          []string
		}{
			{"CephFS (ceph-fuse)", "cephfs", cmnt, []string{"--ceph-admin-socket-dir", c.RunDir()}},
			{"GlusterFS (FUSE)", "glusterfs", gmnt, nil},
			{"local xfs", "local", local, nil},
		} {
			sp, err := b.startSharedPool(ctx, p.name, p.key, p.mnt, p.extra)
			if sp != nil {
				pools = append(pools, sp)
			}
			if err != nil {
				return err
			}
			b.rep.detail("Shared pool "+sp.name, "%s on %s", sp.dir, poolFS(sp.dir))
		}
		b.rep.machine = append(b.rep.machine, "Load average before the shared-filesystem part: "+loadAvg())
		if err := b.sharedControl(ctx, pools); err != nil {
			return err
		}
		return b.sharedData(ctx, pools)
	})
}

// startSharedPool starts a filevol serving a shared pool in mnt/filevol-bench.
func (b *bench) startSharedPool(ctx context.Context, name, key, mnt string, extra []string) (*sharedPool, error) {
	sp := &sharedPool{name: name, key: key, dir: filepath.Join(mnt, "filevol-bench", "pool"),
		kubelet: filepath.Join(b.runDir, "kubelet-"+key), logPath: filepath.Join(b.runDir, "driver-"+key+".log")}
	for _, d := range []string{sp.dir, sp.kubelet} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	args := append([]string{"--mode", "all", "--pool-shared", "--pool-name", "bench-" + key}, extra...)
	d, err := startDriver(ctx, b.cfg.bin, filepath.Join(b.runDir, key+".sock"), sp.dir, sp.kubelet, sp.logPath, b.cfg.verbosity, b.cfg.driverEnv, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sp.d = d
	return sp, nil
}

// stopSharedPools takes the data path's volumes down and stops the
// filevols, before the harnesses' teardowns unmount their filesystems; it
// keeps each filevol's log beside the report.
func (b *bench) stopSharedPools(pools []*sharedPool) {
	for _, p := range pools {
		if p.vol.id != "" {
			if _, err := p.down(context.Background(), p.vol); err != nil {
				b.rep.note("%s: taking the data path's volume down: %v", p.name, err)
			}
		}
		code, took, err := p.d.stop()
		if err != nil || code != 0 {
			b.rep.note("%s: filevol stopped with exit %d after %s: %v", p.name, code, ms(took), err)
		}
		if data, err := os.ReadFile(p.logPath); err == nil {
			_ = os.WriteFile(filepath.Join(filepath.Dir(b.cfg.out), "driver-"+p.key+".log"), data, 0o644)
		}
	}
}

// sharedControl times, --sharedfs-lifecycle times per round and pool (one
// volume of each pool after the other), a volume's way up (CreateVolume;
// ControllerPublishVolume + NodeStageVolume) and down.
func (b *bench) sharedControl(ctx context.Context, pools []*sharedPool) error {
	n := 0
	for round := range b.cfg.fioRounds {
		for range b.cfg.sharedLifecycle {
			for k := range pools {
				p := pools[(k+round)%len(pools)]
				n++
				t, err := p.up(ctx, fmt.Sprintf("lc-%d", n), gib, false)
				if err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				took, err := p.down(ctx, t)
				if err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				p.release = append(p.release, took)
			}
		}
	}
	for _, p := range pools {
		b.rep.info("S1", p.name+": CreateVolume (1 GiB ext4)", fmtSpread(p.create))
		b.rep.info("S2", p.name+": ControllerPublishVolume + NodeStageVolume", fmtSpread(p.attach))
		b.rep.info("S3", p.name+": NodeUnstageVolume + ControllerUnpublishVolume + DeleteVolume", fmtSpread(p.release))
	}
	return nil
}

// fmtSpread is the median of samples and, in brackets, their range.
func fmtSpread(s []time.Duration) string {
	xs := make([]float64, len(s))
	for i, d := range s {
		xs[i] = float64(d)
	}
	med, lo, hi := spread(xs)
	return fmt.Sprintf("%s (%s–%s, n=%d)", ms(time.Duration(med)), ms(time.Duration(lo)), ms(time.Duration(hi)), len(s))
}

// up creates a volume of size bytes, attaches it to node bench and stages
// it, as the external-provisioner, the external-attacher and kubelet
// would, timing the create and the attach with the stage; publish also
// publishes it, for fio.
func (p *sharedPool) up(ctx context.Context, name string, size int64, publish bool) (ioTarget, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	t := ioTarget{name: p.name,
		staging: filepath.Join(p.kubelet, "plugins/kubernetes.io/csi/filevol.csi.io", name, "globalmount"),
		target:  filepath.Join(p.kubelet, "pods", name, "volumes/kubernetes.io~csi", name, "mount")}
	start := time.Now()
	id, err := createFrom(ctx, p.d.ctrl, &csipb.CreateVolumeRequest{Name: name, CapacityRange: &csipb.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csipb.VolumeCapability{capability}})
	if err != nil {
		return t, err
	}
	p.create = append(p.create, time.Since(start))
	t.id = id
	start = time.Now()
	pub, err := p.d.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "bench", VolumeCapability: capability})
	if err != nil {
		return t, p.failedUp(t, fmt.Errorf("ControllerPublishVolume %s: %w", id, err))
	}
	if _, err := p.d.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: t.staging,
		VolumeCapability: capability, PublishContext: pub.GetPublishContext()}); err != nil {
		return t, p.failedUp(t, fmt.Errorf("NodeStageVolume %s: %w", id, err))
	}
	p.attach = append(p.attach, time.Since(start))
	if !publish {
		return t, nil
	}
	if _, err := p.d.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: t.staging,
		TargetPath: t.target, VolumeCapability: capability, PublishContext: pub.GetPublishContext()}); err != nil {
		return t, p.failedUp(t, fmt.Errorf("NodePublishVolume %s: %w", id, err))
	}
	t.file = filepath.Join(t.target, "fio.data")
	return t, nil
}

// failedUp takes down what up made before it failed, and returns its error.
func (p *sharedPool) failedUp(t ioTarget, err error) error {
	if _, derr := p.down(context.Background(), t); derr != nil {
		return fmt.Errorf("%w (and taking it down: %v)", err, derr)
	}
	return err
}

// down unpublishes, unstages, detaches and deletes t's volume, and
// returns how long the unstage, detach and delete took. Every call is
// made (each is idempotent); the first error is returned.
func (p *sharedPool) down(ctx context.Context, t ioTarget) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	_, err := p.d.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: t.id, TargetPath: t.target})
	keep(err)
	start := time.Now()
	_, err = p.d.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: t.id, StagingTargetPath: t.staging})
	keep(err)
	_, err = p.d.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: t.id, NodeId: "bench"})
	keep(err)
	keep(deleteVolume(ctx, p.d.ctrl, t.id))
	return time.Since(start), first
}
