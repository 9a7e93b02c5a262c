package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
)

// lifecycleSteps are the calls oneLifecycle times, in order.
var lifecycleSteps = []string{"CreateVolume", "NodeStageVolume (attach, blkid, mkfs.ext4, mount)", "NodePublishVolume (bind)",
	"NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}

// lifecycle is target 3: a fresh 1 GiB ext4 volume from CreateVolume to a
// published mount, as a pod start sees it. Teardown is timed separately
// and is not part of the target. One extra first iteration is discarded:
// it pays for mkfs.ext4 and blkid coming into the page cache.
func (b *bench) lifecycle(ctx context.Context) error {
	per := make([][]time.Duration, len(lifecycleSteps))
	var total, teardown []time.Duration
	for i := -1; i < b.cfg.lifecycle; i++ {
		d, err := b.oneLifecycle(ctx, i+1)
		if err != nil {
			return err
		}
		if i < 0 {
			continue
		}
		for s := range lifecycleSteps {
			per[s] = append(per[s], d[s])
		}
		total = append(total, d[0]+d[1]+d[2])
		teardown = append(teardown, d[3]+d[4]+d[5])
	}
	s := summarize(total)
	b.rep.target("3", "Create→Stage→Publish, fresh 1 GiB ext4, p50", ms(s.p50), "≤ 80 ms", s.p50 <= 80*time.Millisecond)
	b.rep.info("3", "Create→Stage→Publish p90", ms(s.p90))
	b.rep.info("3", "Unpublish→Unstage→Delete p50 (not a target)", ms(summarize(teardown).p50))
	for i, name := range lifecycleSteps {
		b.rep.detail("Lifecycle step: "+name, "%s", summarize(per[i]))
	}
	return nil
}

// oneLifecycle runs every step on volume lc-<n> and returns each step's
// latency, in the order of lifecycleSteps.
func (b *bench) oneLifecycle(ctx context.Context, n int) ([6]time.Duration, error) {
	var d [6]time.Duration
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pv := fmt.Sprintf("pv-%03d", n)
	staging := filepath.Join(b.kubeletDir(), "plugins/kubernetes.io/csi/filevol.csi.io", pv, "globalmount")
	target := filepath.Join(b.kubeletDir(), "pods", pv, "volumes/kubernetes.io~csi", pv, "mount")
	var id string
	steps := []func() error{
		func() (err error) { id, err = create(ctx, b.d.ctrl, fmt.Sprintf("lc-%03d", n)); return err },
		func() error {
			_, err := b.d.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId: id, StagingTargetPath: staging, VolumeCapability: capability})
			return err
		},
		func() error {
			_, err := b.d.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
				VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability})
			return err
		},
		func() error {
			_, err := b.d.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
			return err
		},
		func() error {
			_, err := b.d.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
			return err
		},
		func() error { return deleteVolume(ctx, b.d.ctrl, id) },
	}
	for i, step := range steps {
		if i == 3 {
			// Outside the clock: the published target must really be a mount.
			if ok, err := mountinfo.Mounted(target); err != nil || !ok {
				return d, fmt.Errorf("volume %s published but %s is not a mount point (%v)", id, target, err)
			}
		}
		t := time.Now()
		err := step()
		d[i] = time.Since(t)
		if err != nil {
			return d, fmt.Errorf("%s of lc-%03d (%s): %w", lifecycleSteps[i], n, id, err)
		}
	}
	return d, nil
}

// fill creates cfg.volumes volumes for the memory and listing figures.
func (b *bench) fill(ctx context.Context) error {
	cs, closeAll, err := b.clients(b.cfg.clients)
	if err != nil {
		return err
	}
	defer closeAll()
	ids, wall, _, err := createMany(ctx, cs, "fill", b.cfg.volumes)
	if err != nil {
		return err
	}
	b.rep.detail(fmt.Sprintf("Filling the pool with %d volumes", len(ids)), "%s (%.0f creates/s)", ms(wall), rate(len(ids), wall))
	return b.sampleMemory("after creating them")
}

// sampleMemory records VmRSS while the pool holds cfg.volumes volumes;
// target 4b is the largest such sample.
func (b *bench) sampleMemory(when string) error {
	m, err := b.d.memory()
	if err != nil {
		return err
	}
	b.rep.detail(fmt.Sprintf("Driver memory with %d volumes, %s", b.cfg.volumes, when), "%s", m)
	if m.rssKiB > b.rss1k.rssKiB {
		b.rss1k = m
	}
	return nil
}

// list is target 5: the whole pool in one call (max_entries 0) and paged
// by 100, each timed from the first request to the last response.
func (b *bench) list(ctx context.Context) error {
	for _, page := range []int32{0, 100} {
		lats := make([]time.Duration, 0, b.cfg.listIterations)
		calls := 0
		for range b.cfg.listIterations {
			t := time.Now()
			n, c, err := listAll(ctx, b.d.ctrl, page)
			lats = append(lats, time.Since(t))
			if err != nil {
				return err
			}
			if n != b.cfg.volumes {
				return fmt.Errorf("ListVolumes (max_entries %d) returned %d volumes, the pool holds %d", page, n, b.cfg.volumes)
			}
			calls = c
		}
		s := summarize(lats)
		b.rep.target("5", fmt.Sprintf("ListVolumes of %d volumes, max_entries %d (%d call(s)), p50", b.cfg.volumes, page, calls),
			ms(s.p50), "≤ 20 ms", s.p50 <= 20*time.Millisecond)
		b.rep.detail(fmt.Sprintf("ListVolumes, max_entries %d, whole listing", page), "%s", s)
	}
	if err := b.sampleMemory("after the listings"); err != nil {
		return err
	}
	return nil
}

// listAll pages through every volume and returns how many it saw and in
// how many calls.
func listAll(ctx context.Context, c csipb.ControllerClient, page int32) (n, calls int, err error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	token := ""
	for {
		resp, err := c.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: page, StartingToken: token})
		calls++
		if err != nil {
			return n, calls, fmt.Errorf("ListVolumes (max_entries %d, token %q): %w", page, token, err)
		}
		n += len(resp.GetEntries())
		if token = resp.GetNextToken(); token == "" {
			return n, calls, nil
		}
	}
}

// restart stops the driver on the full pool and starts it again: the
// SIGTERM exit, the start time and the idle memory with a loaded index.
func (b *bench) restart(ctx context.Context) error {
	if err := b.stopDriver("pool of " + strconv.Itoa(b.cfg.volumes)); err != nil {
		return err
	}
	if err := b.start(ctx); err != nil {
		return err
	}
	b.rep.detail(fmt.Sprintf("Driver start to first Probe answered, %d volumes", b.cfg.volumes), "%s", ms(b.d.ready))
	if err := b.sampleMemory("idle right after a restart"); err != nil {
		return err
	}
	n, _, err := listAll(ctx, b.d.ctrl, 0)
	if err != nil {
		return err
	}
	if n != b.cfg.volumes {
		return fmt.Errorf("after a restart ListVolumes returned %d volumes, the pool holds %d", n, b.cfg.volumes)
	}
	m := b.rss1k
	b.rep.target("4b", fmt.Sprintf("Driver VmRSS with %d volumes (largest sample)", b.cfg.volumes),
		fmt.Sprintf("%.1f MiB", m.mb()), "≤ 40 MiB", m.mb() <= 40)
	return nil
}

// deleteAll deletes every volume through the API and checks that the
// driver and the pool directory agree nothing is left.
func (b *bench) deleteAll(ctx context.Context) error {
	var ids []string
	resp, err := b.d.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
	if err != nil {
		return fmt.Errorf("ListVolumes: %w", err)
	}
	for _, e := range resp.GetEntries() {
		ids = append(ids, e.GetVolume().GetVolumeId())
	}
	cs, closeAll, err := b.clients(b.cfg.clients)
	if err != nil {
		return err
	}
	defer closeAll()
	if _, _, err := parallel(ctx, cs, len(ids), func(ctx context.Context, c csipb.ControllerClient, i int) error {
		return deleteVolume(ctx, c, ids[i])
	}); err != nil {
		return err
	}
	n, _, err := listAll(ctx, b.d.ctrl, 0)
	if err != nil {
		return err
	}
	files := poolFiles(b.poolDir)
	if n != 0 || len(files) != 0 {
		return fmt.Errorf("after deleting %d volumes: ListVolumes returns %d, pool files left %v", len(ids), n, files)
	}
	b.rep.detail("Cleanup through the API", "%d volumes deleted; ListVolumes empty; no image or record left in the pool", len(ids))
	return nil
}
