package csi

import (
	"context"
	"fmt"
	"os"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
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
}

// NodeStageVolume attaches the image to a loop device and, for mount
// volumes, formats it if it carries no filesystem and mounts it at the
// staging path. For block volumes the attached device is the staged state.
func (s *NodeService) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	id, staging, c := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetVolumeCapability()
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	staging, err := s.paths.check("staging target path", staging)
	if err != nil {
		return nil, err
	}
	fsType, err := checkCapability(c)
	if err != nil {
		return nil, err
	}
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	vol, err := s.pool.Get(id)
	if err != nil {
		return nil, err
	}
	// Made if it is a blank volume's first use, and durable before
	// anything can write into it (pool/pending.go).
	if vol, err = s.pool.CommitImage(vol); err != nil {
		return nil, err
	}
	if !s.pool.ImageExists(id) {
		return nil, failedPrecondition("image file %s of volume %s is missing", s.pool.ImagePath(id), id)
	}
	readOnly := readerOnly(c)
	dev, attached, err := s.ensureLoop(ctx, s.pool.ImagePath(id), readOnly)
	if err != nil {
		return nil, err
	}
	// An image grown while its device stayed attached (issue 3).
	if dev, err = s.refreshLoopSize(dev, s.pool.ImagePath(id)); err != nil {
		if attached {
			_ = s.host.DetachLoop(dev.Path)
		}
		return nil, err
	}
	if c.GetBlock() != nil {
		if err := s.stageBlock(dev, staging); err != nil {
			if attached {
				_ = s.host.DetachLoop(dev.Path)
			}
			return nil, err
		}
		klog.InfoS("volume staged", "volumeID", id, "device", dev.Path, "block", true)
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	if err := s.stageFilesystem(ctx, vol, dev, staging, fsType, c.GetMount().GetMountFlags(), readOnly); err != nil {
		if attached {
			// Nothing half-made: the device we attached goes away with the failure.
			if derr := s.host.DetachLoop(dev.Path); derr != nil {
				klog.ErrorS(derr, "detach after failed stage", "device", dev.Path)
			}
		}
		return nil, err
	}
	klog.InfoS("volume staged", "volumeID", id, "device", dev.Path, "stagingPath", staging)
	return &csipb.NodeStageVolumeResponse{}, nil
}

// stageFilesystem mounts dev at staging, formatting it first only when it
// carries no signature at all (filevol never reformats data).
func (s *NodeService) stageFilesystem(ctx context.Context, vol pool.Volume, dev loop.Device, staging, fsType string, flags []string, readOnly bool) error {
	table, err := s.host.Mounts()
	if err != nil {
		return err
	}
	if ms := table.At(staging); len(ms) > 0 {
		top := ms[len(ms)-1]
		if isMountOf(top, dev) {
			return nil // already staged: idempotent
		}
		return alreadyExists("staging path %s already has %s (%s) mounted, which is not volume %s", staging, top.Source, top.FSType, vol.ID)
	}
	found, err := s.host.Probe(ctx, dev.Path)
	if err != nil {
		return fmt.Errorf("probe %s of volume %s: %w", dev.Path, vol.ID, err)
	}
	if found != "" && s.pool.FormatInterrupted(vol.ID) {
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
	// (issue 3). It grows here, unless read-only.
	grow := !readOnly
	switch {
	case found == "" && readOnly:
		return failedPrecondition("volume %s has no filesystem yet and cannot be formatted when staged read-only", vol.ID)
	case found == "":
		if err := s.pool.BeginFormat(vol.ID); err != nil {
			return fmt.Errorf("mark volume %s as formatting: %w", vol.ID, err)
		}
		if err := s.host.Format(ctx, dev.Path, want); err != nil {
			return fmt.Errorf("format %s of volume %s as %s: %w", dev.Path, vol.ID, want, err)
		}
		if err := s.pool.EndFormat(vol.ID); err != nil {
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
	if err := s.host.Mount(dev.Path, staging, found, mountOptions(found, flags, readOnly)); err != nil {
		return fmt.Errorf("mount %s at %s: %w", dev.Path, staging, err)
	}
	if grow {
		if err := s.growAfterMount(ctx, vol, dev, staging, found); err != nil {
			// Unmounted, so that the retry finds an unstaged volume and grows it.
			if uerr := s.host.UnmountAll(staging); uerr != nil {
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
// shares the image's extents (issue 3). 4 KiB is a multiple of every
// alignment a pool filesystem asks, so direct I/O stays on everywhere, and
// mkfs picks 4 KiB sectors and blocks on such a device.
const deviceBlockSize = 4096

// ensureLoop returns the loop device of image with the wanted read-only
// flag, attaching one only when sysfs shows none. attached says whether
// this call attached it.
func (s *NodeService) ensureLoop(ctx context.Context, image string, readOnly bool) (loop.Device, bool, error) {
	devs, err := s.host.FindLoop(image)
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
	d, err := s.host.AttachLoop(ctx, image, loop.Options{ReadOnly: readOnly, DirectIO: true, BlockSize: deviceBlockSize})
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
	if id == "" {
		return nil, invalidArgument("volume ID is missing")
	}
	staging, err := s.paths.check("staging target path", staging)
	if err != nil {
		return nil, err
	}
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	unlock, err := s.locks.tryLock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	u, err := volumeUsage(s.host, s.pool.ImagePath(id))
	if err != nil {
		return nil, err
	}
	var elsewhere []string
	for _, m := range append(u.mounts, u.binds...) {
		if !within(m.MountPoint, staging) {
			elsewhere = append(elsewhere, m.MountPoint)
		}
	}
	if len(elsewhere) > 0 {
		return nil, failedPrecondition("volume %s is still published at %v; unpublish it first", id, elsewhere)
	}
	if err := s.unstageBlock(staging); err != nil {
		return nil, err
	}
	if err := s.host.UnmountAll(staging); err != nil {
		return nil, fmt.Errorf("unmount %s: %w", staging, err)
	}
	if u.inUse() {
		if err := s.host.DetachImage(s.pool.ImagePath(id)); err != nil {
			return nil, fmt.Errorf("detach loop devices of volume %s: %w", id, err)
		}
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

// topMount returns the uppermost mount at path, if any.
func topMount(t mount.Table, path string) (mount.Info, bool) {
	ms := t.At(path)
	if len(ms) == 0 {
		return mount.Info{}, false
	}
	return ms[len(ms)-1], true
}
