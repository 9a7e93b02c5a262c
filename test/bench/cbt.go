package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// The changed-block tracking phase (--only cbt): GetMetadataAllocated and
// GetMetadataDelta of the SnapshotMetadata service on a thin block volume
// with a share of its blocks changed between two snapshots, on an xfs and
// a btrfs pool (reflink snapshots: filevol answers from the extent maps),
// side by side with csi-driver-host-path's hostpathplugin (which reads and
// compares both snapshots) on the same pool filesystem, the two drivers'
// calls interleaved round by round (cbtmeasure.go).

// cbtPoolFSSize is each pool filesystem's size (sparse): room for the
// reference's fully allocated (fallocate) volume beside filevol's.
const cbtPoolFSSize = 512 << 30

// cbtSide is one driver's volume in the phase.
type cbtSide struct {
	name            string
	d               *driverProc
	smd             csipb.SnapshotMetadataClient
	size            int64
	vc              *csipb.VolumeCapability
	volID           string
	staging, target string
	snaps           []string
	work            *cbtWork
}

func (b *bench) cbt(ctx context.Context) error {
	// The phase runs its own drivers, on pools of its own.
	if err := b.stopDriver("before the changed-block tracking phase"); err != nil {
		return err
	}
	b.rep.detail("Changed-block tracking, how", "per pool filesystem: one %d GiB thin block volume per driver (hostpath: %d GiB, fallocated by its CreateVolume), "+
		"staged and published, written through the published device with O_DIRECT; base pattern %d KiB every %d MiB, CreateSnapshot, "+
		"then per case the given share of distinct 4 KiB blocks at random places (%.0f %% of them rewritten with the bytes they held), fsync, CreateSnapshot; "+
		"%d rounds, the drivers alternating who goes first; before every call `sync` and drop_caches=3 (cold caches); bytes read: the pool filesystem's loop device "+
		"(/sys/block/loopN/stat sectors read × 512) and the driver process's /proc/PID/io (read_bytes: from storage; rchar: through read calls, cached or not)",
		b.cfg.cbtGiB, b.cbtRefGiB(), cbtBaseRun>>10, cbtBaseEvery>>20, 100*b.cfg.cbtSame, b.cfg.cbtRounds)
	for _, fsType := range strings.Split(b.cfg.cbtFS, ",") {
		if err := b.cbtOn(ctx, fsType); err != nil {
			return fmt.Errorf("changed-block tracking on %s: %w", fsType, err)
		}
	}
	return nil
}

func (b *bench) cbtRefGiB() int {
	if b.cfg.cbtRefGiB > 0 {
		return b.cfg.cbtRefGiB
	}
	return b.cfg.cbtGiB
}

func (b *bench) cbtOn(ctx context.Context, fsType string) (err error) {
	mnt, done, err := b.runFS(ctx, "cbt-"+fsType, fsType, cbtPoolFSSize)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, done()) }()
	m, err := mountOf(mnt)
	if err != nil {
		return err
	}
	poolDev := filepath.Base(m.Source)
	pool := filepath.Join(mnt, "pool")
	if err := os.MkdirAll(pool, 0o700); err != nil {
		return err
	}
	fvSock, fvLog := filepath.Join(b.runDir, "cbt-"+fsType+".sock"), filepath.Join(b.runDir, "cbt-"+fsType+".log")
	fv, err := startDriver(ctx, b.cfg.bin, fvSock, pool, b.kubeletDir(), fvLog, b.cfg.verbosity, b.cfg.driverEnv)
	if err != nil {
		return err
	}
	sides := []*cbtSide{{name: "filevol", d: fv, size: int64(b.cfg.cbtGiB) << 30}}
	defer func() { err = errors.Join(err, b.cbtStop(sides)) }()
	if b.cfg.referenceBin != "" {
		state := filepath.Join(mnt, "hostpath-state")
		refSock := filepath.Join(b.runDir, "cbt-hostpath-"+fsType+".sock")
		// VARIABLE_LENGTH: adjacent changed blocks in one tuple, as
		// filevol sends them (FIXED_LENGTH would send one per 4 KiB).
		ref, err := startProc(ctx, []string{b.cfg.referenceBin, "--endpoint", "unix://" + refSock, "--nodeid", "bench",
			"--statedir", state, "--drivername", "hostpath.csi.k8s.io", "--enable-snapshot-metadata",
			"--snapshot-metadata-block-type", "VARIABLE_LENGTH"}, refSock, filepath.Join(b.runDir, "cbt-hostpath-"+fsType+".log"), nil)
		if err != nil {
			return fmt.Errorf("reference driver: %w", err)
		}
		sides = append(sides, &cbtSide{name: "hostpath", d: ref, size: int64(b.cbtRefGiB()) << 30})
	}
	for i, s := range sides {
		s.smd = csipb.NewSnapshotMetadataClient(s.d.conn)
		s.work = newCbtWork(s.size, uint64(i+1)*0x5eed5)
		if err := b.cbtProvision(ctx, s, fsType); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		c, err := s.work.writeBase(ctx, s.target)
		if err != nil {
			return fmt.Errorf("%s base pattern: %w", s.name, err)
		}
		if err := s.snapshot(ctx, "base"); err != nil {
			return err
		}
		b.rep.detail(fmt.Sprintf("CBT %s, %s: base pattern", fsType, s.name), "%d MiB written in %s", c.bytes()>>20, c.took.Round(time.Millisecond))
	}
	b.rep.machine = append(b.rep.machine, fmt.Sprintf("Load average before changed-block tracking on %s: %s", fsType, loadAvg()))
	for _, p := range strings.Split(b.cfg.cbtChanges, ",") {
		pct, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return fmt.Errorf("--cbt-changes %q: %w", p, err)
		}
		changes := make([]cbtChange, len(sides))
		for i, s := range sides {
			c, err := s.work.change(ctx, s.target, pct, b.cfg.cbtSame)
			if err != nil {
				return fmt.Errorf("%s: change %s %%: %w", s.name, p, err)
			}
			if err := s.snapshot(ctx, "c"+p); err != nil {
				return err
			}
			changes[i] = c
			b.rep.detail(fmt.Sprintf("CBT %s, %s: %s %% changed", fsType, s.name, p), "%d blocks (%d MiB) written in %s, %d of them with the bytes they held (%d on never-written blocks: zeros)",
				c.blocks, c.bytes()>>20, c.took.Round(time.Millisecond), c.same, c.sameOnHoles)
		}
		if err := b.cbtMeasure(ctx, fsType, p+" %", poolDev, mnt, sides, changes); err != nil {
			return err
		}
	}
	return nil
}

// cbtProvision creates, stages and publishes s's block volume.
func (b *bench) cbtProvision(ctx context.Context, s *cbtSide, fsType string) error {
	s.vc = &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: capability.AccessMode}
	pv := "cbt-" + fsType + "-" + s.name
	driverName := "filevol.csi.io"
	if s.name == "hostpath" {
		driverName = "hostpath.csi.k8s.io"
	}
	s.staging = filepath.Join(b.kubeletDir(), "plugins/kubernetes.io/csi", driverName, pv, "globalmount")
	s.target = filepath.Join(b.kubeletDir(), "pods", pv, "volumeDevices/kubernetes.io~csi", pv)
	// kubelet makes the staging directory and the block target's parent.
	for _, dir := range []string{s.staging, filepath.Dir(s.target)} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := s.d.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: pv,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: s.size}, VolumeCapabilities: []*csipb.VolumeCapability{s.vc}})
	if err != nil {
		return fmt.Errorf("CreateVolume %s: %w", pv, err)
	}
	s.volID = resp.GetVolume().GetVolumeId()
	if _, err := s.d.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: s.volID, StagingTargetPath: s.staging, VolumeCapability: s.vc}); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", pv, err)
	}
	if _, err := s.d.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: s.volID, StagingTargetPath: s.staging,
		TargetPath: s.target, VolumeCapability: s.vc}); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", pv, err)
	}
	return nil
}

func (s *cbtSide) snapshot(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := s.d.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: s.volID, Name: s.volID + "-" + name})
	if err != nil {
		return fmt.Errorf("%s: CreateSnapshot %s: %w", s.name, name, err)
	}
	s.snaps = append(s.snaps, resp.GetSnapshot().GetSnapshotId())
	return nil
}

// cbtStop unpublishes, unstages and deletes what the sides made, then
// stops their drivers. What fails here is left to the run's cleanup
// (CleanLeftovers), which checks that nothing stays behind.
func (b *bench) cbtStop(sides []*cbtSide) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var errs []error
	for _, s := range sides {
		if s.volID != "" {
			_, err1 := s.d.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: s.volID, TargetPath: s.target})
			_, err2 := s.d.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: s.volID, StagingTargetPath: s.staging})
			errs = append(errs, err1, err2)
			for _, id := range s.snaps {
				_, err := s.d.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: id})
				errs = append(errs, err)
			}
			errs = append(errs, deleteVolume(ctx, s.d.ctrl, s.volID))
		}
		if code, _, err := s.d.stop(); err != nil || code != 0 {
			errs = append(errs, fmt.Errorf("%s stop: exit %d: %v", s.name, code, err))
		}
	}
	return errors.Join(errs...)
}
