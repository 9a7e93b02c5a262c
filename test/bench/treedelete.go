package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/dirpool"
)

// The tree-delete phase (--only tree-delete): a directory volume whose
// pod wrote a million files must be deleted without holding up other
// calls or outlasting the provisioner's timeout, so it is measured. On
// each kind of directory pool (btrfs: a subvolume with a quota; ext4: a
// plain directory, size unenforced) it fills a directory volume through
// its published target as a pod would (treefill.go), then deletes it
// while a second client creates and deletes small directory volumes in a
// loop, and times the delete, those calls, the background removal and
// the driver's memory meanwhile.

// provisionerTimeout is external-provisioner's default --timeout: a
// DeleteVolume or CreateVolume slower than this is retried by the
// sidecar, and the user sees the claim stuck.
const provisionerTimeout = 10 * time.Second

// treeFSSize is each tree-delete filesystem's size (sparse).
const treeFSSize = 16 << 30

// treeFileBytes is what each of the million files holds: small files are
// the case where a tree's deletion costs the most per byte.
const treeFileBytes = 64

// treeRemovalTimeout bounds the wait for the background removal.
const treeRemovalTimeout = 30 * time.Minute

// capacityReturnTimeout bounds the wait, after the removal, for
// GetCapacity to give back what the tree took.
const capacityReturnTimeout = 3 * time.Minute

func (b *bench) treeDelete(ctx context.Context) error {
	// The phase runs its own drivers, one per directory pool.
	if err := b.stopDriver("before the tree delete"); err != nil {
		return err
	}
	for _, fsType := range strings.Split(b.cfg.treeFS, ",") {
		if err := b.treeDeleteOn(ctx, fsType); err != nil {
			return fmt.Errorf("tree delete on %s: %w", fsType, err)
		}
	}
	return nil
}

// treeRemoval is what one delete of the big volume measured.
type treeRemoval struct {
	deleteTook time.Duration // DeleteVolume of the big volume
	removed    time.Duration // delete → the volume gone from the trash
	cleaned    time.Duration // delete → btrfs's cleaner done (btrfs only)
	during     churnTimes    // the other calls meanwhile
	peak       memory        // highest VmRSS sampled meanwhile
}

func (b *bench) treeDeleteOn(ctx context.Context, fsType string) (err error) {
	mnt, done, err := b.runFS(ctx, "tree-"+fsType, fsType, treeFSSize)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, done()) }()
	b.driverArgs = []string{"--dir-pool-dir", mnt}
	if err := b.start(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.stopDriver("after the tree delete on "+fsType)) }()

	label := fsType + " (a subvolume with a quota)"
	params := map[string]string{"provisioningMode": "directory"}
	if fsType != "btrfs" {
		label = fsType + " (a plain directory, size unenforced)"
		params["allowUnenforcedSize"] = "true"
	}
	capacity := func() (int64, error) {
		r, err := b.d.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{Parameters: params, VolumeCapabilities: []*csipb.VolumeCapability{dirCapability}})
		if err != nil {
			return 0, fmt.Errorf("GetCapacity: %w", err)
		}
		return r.GetAvailableCapacity(), nil
	}
	before, err := capacity()
	if err != nil {
		return err
	}
	id, err := createDir(ctx, b.d.ctrl, "tree-"+fsType, params, 8<<30)
	if err != nil {
		return err
	}
	took, subvolume, err := b.fillTree(ctx, id, fsType == "btrfs")
	if err != nil {
		return err
	}
	b.rep.detail("Tree delete, "+label+": filling the volume through its target", "%d files of %d bytes in %d directories: %s (%.0f files/s)",
		b.cfg.treeFiles, treeFileBytes, treeDirs(b.cfg.treeFiles, b.cfg.treeWidth), ms(took), rate(b.cfg.treeFiles, took))
	start := time.Now()
	if err := syncFS(mnt); err != nil {
		return err
	}
	b.rep.detail("Tree delete, "+label+": syncfs after the fill", "%s", ms(time.Since(start)))

	baseline, err := churn(ctx, b.d.ctrl, params, nil, 20)
	if err != nil {
		return err
	}
	memBefore, err := b.d.memory()
	if err != nil {
		return err
	}
	start = time.Now()
	r, err := b.removeTree(ctx, mnt, id, subvolume, params, memBefore)
	if err != nil {
		return err
	}
	// btrfs keeps the block groups that held the tree's metadata until its
	// cleaner finds them empty: statfs, and so GetCapacity, gives the room
	// back a while after the subvolume is gone.
	after, err := capacity()
	back := time.Since(start)
	for deadline := time.Now().Add(capacityReturnTimeout); err == nil && after < before && time.Now().Before(deadline); back = time.Since(start) {
		time.Sleep(time.Second)
		after, err = capacity()
	}
	if err != nil {
		return err
	}

	b.reportTreeDelete(fsType, label, r)
	b.rep.detail("Tree delete, "+label+": CreateVolume of a small directory volume, before", "%s", baseline.create)
	b.rep.detail("Tree delete, "+label+": CreateVolume of a small directory volume, during the removal", "%s", r.during.create)
	b.rep.detail("Tree delete, "+label+": DeleteVolume of a small directory volume, before", "%s", baseline.delete)
	b.rep.detail("Tree delete, "+label+": DeleteVolume of a small directory volume, during the removal", "%s", r.during.delete)
	b.rep.detail("Tree delete, "+label+": driver memory", "before the delete %s; highest VmRSS sampled during the removal %s", memBefore, r.peak)
	returned := fmt.Sprintf("back %s after the delete", ms(back))
	if after < before {
		returned = fmt.Sprintf("still %.1f MiB short %s after the delete", float64(before-after)/(1<<20), ms(back))
	}
	b.rep.detail("Tree delete, "+label+": GetCapacity available", "before the fill %.1f MiB, after the removal %.1f MiB: %s",
		float64(before)/(1<<20), float64(after)/(1<<20), returned)
	return nil
}

// removeTree deletes volume id, the big one, with churn beside it until
// its removal is over (on btrfs: until the kernel's cleaner has freed its
// subvolume too), sampling the driver's memory every 100 ms.
func (b *bench) removeTree(ctx context.Context, mnt, id, subvolume string, params map[string]string, mem memory) (treeRemoval, error) {
	r := treeRemoval{peak: mem}
	stop := make(chan struct{})
	var churnErr error
	var wg sync.WaitGroup
	wg.Go(func() { r.during, churnErr = churn(ctx, b.d.ctrl, params, stop, 0) })
	err := b.waitRemoved(ctx, mnt, id, subvolume, &r)
	close(stop)
	wg.Wait()
	if err == nil && churnErr != nil {
		err = fmt.Errorf("calls beside the delete: %w", churnErr)
	}
	return r, err
}

// waitRemoved deletes volume id and fills in r's times and peak memory.
func (b *bench) waitRemoved(ctx context.Context, mnt, id, subvolume string, r *treeRemoval) error {
	sampler := time.NewTicker(100 * time.Millisecond)
	defer sampler.Stop()
	start := time.Now()
	err := deleteVolume(ctx, b.d.ctrl, id)
	r.deleteTook = time.Since(start)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(treeRemovalTimeout); ; {
		left, err := dirpool.Deleting(mnt, id)
		if err != nil {
			return err
		}
		if !left {
			r.removed = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the trash of %s still holds the volume %s after the delete", mnt, treeRemovalTimeout)
		}
		<-sampler.C
		if m, merr := b.d.memory(); merr == nil && m.rssKiB > r.peak.rssKiB {
			r.peak = m
		}
	}
	if subvolume == "" {
		return nil
	}
	// The pool's part ends with the subvolume destroyed; the kernel's
	// cleaner frees its tree afterwards, with the churn still running.
	err = btrfsSubvolumeSync(ctx, mnt, subvolume)
	r.cleaned = time.Since(start)
	return err
}

// reportTreeDelete writes the targets' rows of one delete.
func (b *bench) reportTreeDelete(fsType, label string, r treeRemoval) {
	b.rep.target("T1", fmt.Sprintf("DeleteVolume, directory volume of %d files, %s", b.cfg.treeFiles, label), ms(r.deleteTook),
		"< "+provisionerTimeout.String()+" (provisioner timeout)", r.deleteTook < provisionerTimeout)
	worst := max(r.during.create.max, r.during.delete.max)
	b.rep.target("T2", "Slowest CreateVolume/DeleteVolume of another directory volume meanwhile, "+fsType,
		fmt.Sprintf("%s (%d calls)", ms(worst), r.during.create.n+r.during.delete.n), "< "+provisionerTimeout.String(), worst < provisionerTimeout && r.during.create.n > 0)
	b.rep.info("T3", "Background removal, delete to the volume gone from the trash, "+fsType, ms(r.removed))
	if r.cleaned > 0 {
		b.rep.info("T3", "Delete to the kernel's cleaner done (btrfs subvolume sync), btrfs", ms(r.cleaned))
	}
}
