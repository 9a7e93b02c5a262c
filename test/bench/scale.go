package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scaleVol is one volume of the scale part, with its kubelet paths.
type scaleVol struct{ id, staging, target string }

// scale is the many-volumes part (make scale): cfg.scaleVolumes ext4
// volumes created, staged and published on the one node, one after the
// other as a node filling up sees them; then, with all of them in use, the
// driver's scrape, node view, memory, restart with its orphan sweep, and a
// simulated reboot; then everything is torn down through the API.
func (b *bench) scale(ctx context.Context) error {
	n := b.cfg.scaleVolumes
	b.rep.machine = append(b.rep.machine, "Kernel limits: "+kernelLimits(), "Load average before the scale part: "+loadAvg())
	vols := make([]scaleVol, n)
	for i := range vols {
		pv := fmt.Sprintf("pv-%05d", i)
		vols[i] = scaleVol{
			staging: filepath.Join(b.kubeletDir(), "plugins/kubernetes.io/csi/filevol.csi.io", pv, "globalmount"),
			target:  filepath.Join(b.kubeletDir(), "pods", pv, "volumes/kubernetes.io~csi", pv, "mount"),
		}
	}
	defer b.scaleTeardown(vols)
	if err := b.scaleFill(ctx, vols); err != nil {
		return err
	}
	if err := b.scaleInUse(ctx, n); err != nil {
		return err
	}
	if err := b.scaleRestart(ctx, vols); err != nil {
		return err
	}
	return b.scaleReboot(ctx, vols)
}

// scaleFill creates, stages and publishes every volume in turn, reporting
// time and memory as they accumulate and NodeStageVolume's p50 over the
// ten stages up to 10, 100 and n.
func (b *bench) scaleFill(ctx context.Context, vols []scaleVol) error {
	n := len(vols)
	stage := make([]time.Duration, n)
	start := time.Now()
	for i := range vols {
		v := &vols[i]
		id, err := create(ctx, b.d.ctrl, fmt.Sprintf("scale-%05d", i))
		if err != nil {
			return err
		}
		v.id = id
		if err := b.stageAndPublish(ctx, b.d.node, *v, &stage[i]); err != nil {
			return fmt.Errorf("volume %d of %d: %w", i+1, n, err)
		}
		if k := i + 1; k == 10 || k == 100 || k%250 == 0 || k == n {
			m, err := b.d.memory()
			if err != nil {
				return err
			}
			b.rep.detail(fmt.Sprintf("Scale: %d volumes created, staged and published", k), "after %s; driver %s; last 10 stages %s; load %s",
				time.Since(start).Round(time.Millisecond), m, summarize(stage[max(0, k-10):k]), loadAvg())
		}
	}
	for i, k := range []int{10, 100, n} {
		if k > n || i == 2 && (n == 10 || n == 100) {
			continue // more than were staged, or already reported
		}
		s := summarize(stage[max(0, k-10):k])
		b.rep.info("S1", fmt.Sprintf("NodeStageVolume p50 at %d staged (stages %d–%d)", k, max(1, k-9), k), ms(s.p50))
	}
	if n >= 100 {
		first, last := summarize(stage[:10]).p50, summarize(stage[n-10:]).p50
		r := float64(last) / float64(first)
		b.rep.target("S1", fmt.Sprintf("NodeStageVolume p50 at %d staged ÷ at 10 staged", n), fmt.Sprintf("%.2f", r), "flat (≤ 1.25)", r <= 1.25)
	}
	return nil
}

// stageAndPublish stages and publishes v, the stage timed into *stageLat.
func (b *bench) stageAndPublish(ctx context.Context, node csipb.NodeClient, v scaleVol, stageLat *time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	t := time.Now()
	if _, err := node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: capability}); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", v.id, err)
	}
	if stageLat != nil {
		*stageLat = time.Since(t)
	}
	if _, err := node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging,
		TargetPath: v.target, VolumeCapability: capability}); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", v.id, err)
	}
	return nil
}

// scaleInUse times what an operator's tools and Prometheus do on a full
// node: a /metrics scrape and a /debug/volumes read (five of each, p50),
// and the driver's memory.
func (b *bench) scaleInUse(ctx context.Context, n int) error {
	for _, p := range []struct {
		path string
		goal time.Duration
	}{{"/metrics", 250 * time.Millisecond}, {"/debug/volumes", 500 * time.Millisecond}} {
		var lats []time.Duration
		var size int
		var getErr error
		began := time.Now()
		// Five samples, fewer when each takes many seconds.
		for k := 0; k < 5 && (k == 0 || time.Since(began) < 20*time.Second); k++ {
			t := time.Now()
			body, err := b.httpGet(ctx, p.path)
			lats = append(lats, time.Since(t))
			if err != nil {
				// Too slow is a figure too: reported, and the run goes on.
				getErr = err
				break
			}
			size = len(body)
		}
		if getErr != nil {
			b.rep.target("S2", fmt.Sprintf("GET %s with %d volumes in use", p.path, n), fmt.Sprintf("failed after %s: %v", ms(lats[len(lats)-1]), getErr),
				"≤ "+ms(p.goal), false)
			continue
		}
		s := summarize(lats)
		b.rep.target("S2", fmt.Sprintf("GET %s with %d volumes in use, p50 of %d", p.path, n, len(lats)), ms(s.p50), "≤ "+ms(p.goal), s.p50 <= p.goal)
		b.rep.detail("Scale: GET "+p.path, "%s; %d bytes", s, size)
	}
	m, err := b.d.memory()
	if err != nil {
		return err
	}
	b.rep.target("S2", fmt.Sprintf("Driver VmRSS with %d volumes in use", n), fmt.Sprintf("%.1f MiB", m.mb()), "≤ 60 MB", float64(m.rssKiB)*1024 <= 60e6)
	return nil
}

// scaleRestart stops the driver and starts it again on the full node: the
// time to serving, the orphan sweep every start makes (its duration from
// the driver's own gauge), and every volume's health through
// NodeGetVolumeHealth.
func (b *bench) scaleRestart(ctx context.Context, vols []scaleVol) error {
	if err := b.stopDriver(fmt.Sprintf("%d volumes in use", len(vols))); err != nil {
		return err
	}
	t := time.Now()
	if err := b.start(ctx); err != nil {
		return err
	}
	abnormal, err := b.allHealthy(ctx, vols)
	if err != nil {
		return err
	}
	healthy := time.Since(t)
	b.rep.target("S3", fmt.Sprintf("Restart with %d in use: start to Probe answered", len(vols)), ms(b.d.ready), "≤ 2 s", b.d.ready <= 2*time.Second)
	b.rep.target("S3", fmt.Sprintf("Restart with %d in use: start to every volume's NodeGetVolumeHealth healthy", len(vols)),
		fmt.Sprintf("%s, %d abnormal", ms(healthy), abnormal), "≤ 2 s, 0 abnormal", healthy <= 2*time.Second && abnormal == 0)
	sweep, err := b.sweepSeconds(ctx)
	if err != nil {
		return err
	}
	b.rep.target("S2", fmt.Sprintf("Orphan sweep with %d volumes in use (filevol_gc_sweep_duration_seconds)", len(vols)),
		ms(sweep), "≤ 200 ms", sweep <= 200*time.Millisecond)
	return nil
}

// allHealthy asks NodeGetVolumeHealth for every published volume with
// cfg.clients clients and counts the abnormal ones.
func (b *bench) allHealthy(ctx context.Context, vols []scaleVol) (int, error) {
	var abnormal = make([]bool, len(vols))
	err := b.nodeParallel(ctx, len(vols), func(ctx context.Context, node csipb.NodeClient, i int) error {
		r, err := node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{VolumeId: vols[i].id, VolumePublishPath: vols[i].target,
			StagingTargetPath: vols[i].staging})
		if err != nil {
			return fmt.Errorf("NodeGetVolumeHealth %s: %w", vols[i].id, err)
		}
		// A healthy volume has no health entry at all.
		abnormal[i] = len(r.GetVolumeHealth().GetHealthStatuses()) > 0
		return nil
	})
	k := 0
	for _, a := range abnormal {
		if a {
			k++
		}
	}
	return k, err
}

// scaleReboot leaves what a reboot leaves (records and images, no mount,
// no loop device), starts the driver and stages and publishes every volume
// again with cfg.clients callers, as kubelet does when it comes back.
func (b *bench) scaleReboot(ctx context.Context, vols []scaleVol) error {
	if err := b.stopDriver("before a simulated reboot"); err != nil {
		return err
	}
	if err := simulateReboot(b.kubeletDir(), b.poolDir); err != nil {
		return fmt.Errorf("simulated reboot: %w", err)
	}
	t := time.Now()
	if err := b.start(ctx); err != nil {
		return err
	}
	err := b.nodeParallel(ctx, len(vols), func(ctx context.Context, node csipb.NodeClient, i int) error {
		return b.stageAndPublish(ctx, node, vols[i], nil)
	})
	if err != nil {
		return fmt.Errorf("after the simulated reboot: %w", err)
	}
	took := time.Since(t)
	b.rep.info("S4", fmt.Sprintf("Simulated reboot: driver start and %d volumes staged and published again (%d callers)", len(vols), b.cfg.clients),
		fmt.Sprintf("%s (%.1f volumes/s)", ms(took), rate(len(vols), took)))
	return nil
}

// scaleTeardown unpublishes, unstages and deletes every volume through the
// API, timed; cleanup then checks that nothing is left.
func (b *bench) scaleTeardown(vols []scaleVol) {
	if b.d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t := time.Now()
	err := b.nodeParallel(ctx, len(vols), func(ctx context.Context, node csipb.NodeClient, i int) error {
		v := vols[i]
		if v.id == "" {
			return nil
		}
		if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
			return err
		}
		// Another engineer's mount namespace can hold a copy of the
		// mount for a moment (loop device busy): kubelet retries, so
		// does the harness.
		var err error
		for range 20 {
			if _, err = node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); status.Code(err) != codes.FailedPrecondition {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		return deleteVolume(ctx, b.d.ctrl, v.id)
	})
	if err != nil {
		b.rep.note("scale teardown: %v", err)
		return
	}
	b.rep.detail(fmt.Sprintf("Scale: %d volumes unpublished, unstaged and deleted (%d callers)", len(vols), b.cfg.clients), "%s", ms(time.Since(t)))
}

// nodeParallel runs op for i in [0, n) on cfg.clients connections.
func (b *bench) nodeParallel(ctx context.Context, n int, op func(ctx context.Context, node csipb.NodeClient, i int) error) error {
	var cs []csipb.ControllerClient
	nodes := map[csipb.ControllerClient]csipb.NodeClient{}
	for range b.cfg.clients {
		conn, err := dial(b.socket)
		if err != nil {
			return err
		}
		defer conn.Close()
		c := csipb.NewControllerClient(conn)
		cs = append(cs, c)
		nodes[c] = csipb.NewNodeClient(conn)
	}
	_, _, err := parallel(ctx, cs, n, func(ctx context.Context, c csipb.ControllerClient, i int) error {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		return op(ctx, nodes[c], i)
	})
	return err
}
