package csi

import (
	"context"
	"errors"
	"fmt"
	"os"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volview"
)

// NodeService implements the CSI Node service: loop devices, filesystems
// and mounts on this node. Every call reads the kernel's state (sysfs,
// mountinfo) and acts on it, so a retried call, a restarted driver or a
// rebooted node all converge to the requested state.
type NodeService struct {
	csipb.UnimplementedNodeServer
	cfg   Config
	pool  *pool.Pool
	host  Host
	locks *inflight
	paths pathPolicy
	// inuse is where the node records which volumes it has staged, for
	// the controller (internal/inuse).
	inuse *inuse.Store
}

// NodeStageVolume attaches the image to a loop device and, for mount
// volumes, formats it if it carries no filesystem and mounts it at the
// staging path. For block volumes the device bound at <staging>/device is
// the staged state.
func (s *NodeService) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	id, staging, c := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetVolumeCapability()
	fsType, unlock, err := s.begin(id, c, true, checked("staging target path", &staging))
	if err != nil {
		return nil, err
	}
	defer unlock()

	readOnly := readerOnly(c)
	// Recorded first: the controller decides "in use" from these records,
	// so no device of the volume is ever unrecorded, and a DeleteVolume
	// that runs from now on refuses. One that ran before this record and
	// removes the volume meanwhile is caught below (deletedMeanwhile).
	if err := s.recordStaged(id, staging, c.GetBlock() != nil, readOnly); err != nil {
		return nil, err
	}
	vol, err := s.pool.Get(id)
	if err == nil {
		// Made if it is a blank volume's first use, and durable before
		// anything can write into it (pool/pending.go).
		vol, err = s.pool.CommitImage(vol)
	}
	if err == nil && !s.pool.ImageExists(id) {
		err = failedPrecondition("image file %s of volume %s is missing", s.pool.ImagePath(id), id)
	}
	if errors.Is(err, pool.ErrNotFound) {
		// No such volume: nothing of it can be attached here.
		_ = s.inuse.Remove(id, s.cfg.NodeID)
		return nil, err
	}
	if err != nil {
		s.dropStagedIfUnused(id)
		return nil, s.deletedMeanwhile(id, err)
	}
	dev, attached, err := s.ensureLoop(ctx, s.pool.ImagePath(id), readOnly)
	if err != nil {
		s.dropStagedIfUnused(id)
		return nil, s.deletedMeanwhile(id, err)
	}
	err = s.stageDevice(ctx, vol, dev, staging, c, fsType, readOnly)
	if err == nil && attached && s.deletedMeanwhile(id, nil) != nil {
		// Staged an image a concurrent DeleteVolume was removing: undone.
		err = notFound("volume %s was deleted while it was being staged", id)
		if uerr := s.host.Mounts.UnmountAll(staging); uerr != nil {
			klog.ErrorS(uerr, "unmount a volume deleted while staged", "stagingPath", staging)
		}
	}
	if err != nil {
		if attached {
			// Nothing half-made: the device we attached goes away with the
			// failure, and with it this node's record of the volume.
			s.detachAfterFailure(dev, "stage")
			s.dropStagedIfUnused(id)
		}
		return nil, s.deletedMeanwhile(id, err)
	}
	klog.InfoS("volume staged", "volumeID", id, "device", dev.Path, "stagingPath", staging, "block", c.GetBlock() != nil)
	return &csipb.NodeStageVolumeResponse{}, nil
}

// stageDevice makes the attached dev the staged state at staging: its size
// caught up with the image, then bound (block) or mounted (filesystem).
func (s *NodeService) stageDevice(ctx context.Context, vol pool.Volume, dev loop.Device, staging string, c *csipb.VolumeCapability, fsType string, readOnly bool) error {
	// An image grown (ControllerExpandVolume) while its device stayed attached.
	dev, err := s.refreshLoopSize(dev, s.pool.ImagePath(vol.ID))
	if err != nil {
		return err
	}
	if c.GetBlock() != nil {
		return s.stageBlock(dev, staging)
	}
	return s.stageFilesystem(ctx, vol, dev, staging, fsType, c.GetMount().GetMountFlags(), readOnly)
}

// detachAfterFailure detaches a device this call attached before failing,
// so a failed call leaves no device behind. A failure to detach is logged:
// the call's own error is what the CO must see, and the garbage collector
// detaches what nothing uses.
func (s *NodeService) detachAfterFailure(dev loop.Device, call string) {
	if err := s.host.Loops.Detach(dev.Path); err != nil {
		klog.ErrorS(err, "detach after failed "+call, "device", dev.Path)
	}
}

// stageFilesystem mounts dev at staging, formatting it first only when it
// carries no signature at all (filevol never reformats data).
func (s *NodeService) stageFilesystem(ctx context.Context, vol pool.Volume, dev loop.Device, staging, fsType string, flags []string, readOnly bool) error {
	table, err := s.host.Mounts.Table()
	if err != nil {
		return err
	}
	if top, ok := table.Top(staging); ok {
		if volview.Mounts(top, dev) {
			return nil // already staged: idempotent
		}
		return alreadyExists("staging path %s already has %s (%s) mounted, which is not volume %s", staging, top.Source, top.FSType, vol.ID)
	}
	found, err := s.host.FS.Probe(ctx, dev.Path)
	if err != nil {
		return fmt.Errorf("probe %s of volume %s: %w", dev.Path, vol.ID, err)
	}
	if found != "" && s.pool.NodeState().Format.IsSet(vol.ID) {
		// Our own first mkfs died half-way (the marker says so): what the
		// device carries is not data, only the start of a filesystem.
		klog.InfoS("an earlier format of this volume was interrupted; formatting again", "volumeID", vol.ID, "found", found)
		found = ""
	}
	want := fsType
	if want == "" {
		want = vol.FSType
	}
	// A filesystem found (not just made) may be smaller than its device:
	// restored or cloned into a bigger volume, or expanded while unstaged
	// (ControllerExpandVolume). It grows here, unless read-only.
	grow := !readOnly
	switch {
	case found == "" && readOnly:
		return failedPrecondition("volume %s has no filesystem yet and cannot be formatted when staged read-only", vol.ID)
	case found == "":
		if err := s.pool.NodeState().Format.Set(vol.ID); err != nil {
			return fmt.Errorf("mark volume %s as formatting: %w", vol.ID, err)
		}
		if err := s.host.FS.Format(ctx, dev.Path, want); err != nil {
			return fmt.Errorf("format %s of volume %s as %s: %w", dev.Path, vol.ID, want, err)
		}
		if err := s.pool.NodeState().Format.Clear(vol.ID); err != nil {
			return fmt.Errorf("mark volume %s as formatted: %w", vol.ID, err)
		}
		klog.InfoS("formatted", "volumeID", vol.ID, "device", dev.Path, "fsType", want)
		found, grow = want, false
	case !supportedFS(found):
		return failedPrecondition("%s of volume %s carries a %q signature; filevol formats only empty devices and never overwrites data", dev.Path, vol.ID, found)
	case fsType != "" && found != fsType:
		return failedPrecondition("volume %s holds a %s filesystem but %s was requested", vol.ID, found, fsType)
	}
	if grow {
		if err := s.growBeforeMount(ctx, vol, dev, found); err != nil { // node_grow.go
			return err
		}
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return fmt.Errorf("create staging path: %w", err)
	}
	if err := s.host.Mounts.Mount(dev.Path, staging, found, mountOptions(found, flags, readOnly)); err != nil {
		return fmt.Errorf("mount %s at %s: %w", dev.Path, staging, err)
	}
	if grow {
		if err := s.growAfterMount(ctx, vol, dev, staging, found); err != nil {
			// Unmounted, so that the retry finds an unstaged volume and grows it.
			if uerr := s.host.Mounts.UnmountAll(staging); uerr != nil {
				klog.ErrorS(uerr, "unmount after failed growth", "stagingPath", staging)
			}
			return err
		}
	}
	return nil
}

// mountOptions adds what filevol needs to the CO's flags. XFS clones and
// restores share their source's UUID, and XFS refuses a second mount of one
// UUID: nouuid makes every filevol XFS volume mountable next to its copies.
func mountOptions(fsType string, flags []string, readOnly bool) []string {
	opts := append(append([]string(nil), flags...), alwaysMountOptions...)
	if fsType == "xfs" {
		opts = append(opts, "nouuid")
	}
	if readOnly {
		opts = append(opts, "ro")
	}
	return opts
}

// deviceBlockSize is the logical block size of every volume's device. It
// must not change over a volume's life: a filesystem made with smaller
// sectors (xfs sectsz=512, ext4 with 1 KiB blocks) refuses to mount on a
// device with larger ones, and block volumes' partition tables and O_DIRECT
// users depend on it too. The kernel's default follows the image's O_DIRECT
// alignment, which on an xfs pool grows to 4 KiB once a snapshot or clone
// shares the image's extents. 4 KiB is a multiple of every
// alignment a pool filesystem asks, so direct I/O stays on everywhere, and
// mkfs picks 4 KiB sectors and blocks on such a device.
const deviceBlockSize = 4096

// ensureLoop returns the loop device of image with the wanted read-only
// flag, attaching one only when sysfs shows none. attached says whether
// this call attached it.
func (s *NodeService) ensureLoop(ctx context.Context, image string, readOnly bool) (loop.Device, bool, error) {
	devs, err := s.host.Loops.Find(image)
	if err != nil {
		return loop.Device{}, false, err
	}
	for _, d := range devs {
		if d.ReadOnly == readOnly && !d.Deleted && !d.Detaching {
			return d, false, nil
		}
	}
	for _, d := range devs {
		if d.Detaching {
			// An earlier detach is waiting for another process to close the
			// device. A second device on the same image would be a double
			// attach: let the CO retry once the kernel has finished.
			return loop.Device{}, false, aborted("loop device %s of %s is still being detached (another process holds it open); retry", d.Path, image)
		}
	}
	d, err := s.host.Loops.Attach(ctx, image, loop.Options{ReadOnly: readOnly, DirectIO: true, BlockSize: deviceBlockSize})
	if err != nil {
		return loop.Device{}, false, fmt.Errorf("attach %s: %w", image, err)
	}
	return d, true, nil
}

// NodeUnstageVolume unmounts the staging path and detaches the volume's
// loop devices. It is idempotent; it refuses while the volume is still
// published somewhere (the CO must unpublish first).
func (s *NodeService) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	_, unlock, err := s.begin(id, nil, false, checked("staging target path", &staging))
	if err != nil {
		return nil, err
	}
	defer unlock()

	u, err := volumeUsage(s.host, s.pool.ImagePath(id))
	if err != nil {
		return nil, err
	}
	var elsewhere []string
	for _, x := range u.Uses {
		if !within(x.MountPoint, staging) {
			elsewhere = append(elsewhere, x.MountPoint)
		}
	}
	if len(elsewhere) > 0 {
		return nil, failedPrecondition("volume %s is still published at %v; unpublish it first", id, elsewhere)
	}
	if err := s.unstageBlock(staging); err != nil {
		return nil, err
	}
	if err := s.host.Mounts.UnmountAll(staging); err != nil {
		return nil, fmt.Errorf("unmount %s: %w", staging, err)
	}
	if u.Attached() {
		if err := s.host.Loops.DetachFile(s.pool.ImagePath(id)); err != nil {
			return nil, fmt.Errorf("detach loop devices of volume %s: %w", id, err)
		}
	}
	// Dropped after the detach: a crash in between leaves a record the
	// node's reconcile or the retried unstage drops.
	if err := s.inuse.Remove(id, s.cfg.NodeID); err != nil {
		return nil, err
	}
	klog.InfoS("volume unstaged", "volumeID", id, "stagingPath", staging)
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// readerOnly reports whether the access mode allows no writer.
func readerOnly(c *csipb.VolumeCapability) bool {
	m := c.GetAccessMode().GetMode()
	return m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}
