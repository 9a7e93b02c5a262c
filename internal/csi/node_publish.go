package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volview"
)

// NodePublishVolume bind-mounts the staged filesystem into the target
// directory, or the loop device node onto the target file for block
// volumes; read-only requests get a read-only bind, or a read-only device.
func (s *NodeService) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id, target, staging, c := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath(), req.GetVolumeCapability()
	_, unlock, err := s.begin(id, c, true, checked("target path", &target), checked("staging target path", &staging))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := s.pool.Get(id); err != nil {
		return nil, err
	}
	readOnly := req.GetReadonly() || readerOnly(c)
	single := c.GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	if c.GetBlock() != nil {
		err = s.publishBlock(ctx, id, staging, target, readOnly, single)
	} else {
		err = s.publishMount(id, staging, target, readOnly, single, c.GetMount().GetMountFlags())
	}
	if err != nil {
		return nil, err
	}
	klog.InfoS("volume published", "volumeID", id, "target", target, "readOnly", readOnly)
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (s *NodeService) publishMount(id, staging, target string, readOnly, single bool, flags []string) error {
	table, err := s.host.Mounts.Table()
	if err != nil {
		return err
	}
	devs, err := s.host.Loops.Find(s.pool.ImagePath(id))
	if err != nil {
		return err
	}
	top, ok := table.Top(staging)
	dev, staged := volview.DeviceOf(devs, top)
	if !ok || !staged || volview.IsDeviceBind(top) {
		return failedPrecondition("volume %s is not staged at %s; call NodeStageVolume first", id, staging)
	}
	if cur, ok := table.Top(target); ok {
		if volview.Mounts(cur, dev) && slices.Contains(cur.Options, "ro") == readOnly {
			return nil // already published: idempotent
		}
		return alreadyExists("target %s already has %s mounted (read-only: %v), incompatible with this request for volume %s",
			target, cur.Source, slices.Contains(cur.Options, "ro"), id)
	}
	if single {
		if others := otherTargets(volview.MountsOf(table, dev), staging, target); len(others) > 0 {
			return failedPrecondition("volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %v", id, others)
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return fmt.Errorf("create target %s: %w", target, err)
	}
	if err := s.host.Mounts.Bind(staging, target, readOnly, flags); err != nil {
		return fmt.Errorf("bind %s to %s: %w", staging, target, err)
	}
	return nil
}

func (s *NodeService) publishBlock(ctx context.Context, id, staging, target string, readOnly, single bool) error {
	image := s.pool.ImagePath(id)
	devs, err := s.host.Loops.Find(image)
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return failedPrecondition("volume %s is not staged on this node (no loop device backs %s); call NodeStageVolume first", id, image)
	}
	table, err := s.host.Mounts.Table()
	if err != nil {
		return err
	}
	if cur, ok := table.Top(target); ok {
		if d, ok := volview.DeviceOf(devs, cur); ok && volview.IsDeviceBind(cur) && d.ReadOnly == readOnly {
			return nil // already published: idempotent
		}
		return alreadyExists("target %s already has %s mounted, incompatible with this request for volume %s", target, cur.Source, id)
	}
	if single {
		var others []string
		for _, d := range devs {
			others = append(others, otherTargets(volview.BindsOf(table, d), volview.StagedDevicePath(staging), target)...)
		}
		if len(others) > 0 {
			return failedPrecondition("volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %v", id, others)
		}
	}
	dev, attached, err := s.ensureLoop(ctx, image, readOnly)
	if err != nil {
		return err
	}
	if err := s.bindDevice(dev, target); err != nil {
		if attached {
			s.detachAfterFailure(dev, "publish")
		}
		return err
	}
	return nil
}

// bindDevice binds the device node onto target, a regular file it creates.
// An empty directory there (some COs pre-create the target) is replaced.
func (s *NodeService) bindDevice(dev loop.Device, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return fmt.Errorf("create parent of %s: %w", target, err)
	}
	if st, err := os.Lstat(target); err == nil && st.IsDir() {
		if err := os.Remove(target); err != nil {
			return failedPrecondition("target %s of a block volume is a non-empty directory: %v", target, err)
		}
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return fmt.Errorf("create target file %s: %w", target, err)
	}
	f.Close()
	if err := s.host.Mounts.Bind(dev.Path, target, false, nil); err != nil {
		return fmt.Errorf("bind %s to %s: %w", dev.Path, target, err)
	}
	return nil
}

// NodeUnpublishVolume unmounts the target and removes it (spec: the SP
// MUST delete what it created). Read-only devices made for a block publish
// are detached once no bind uses them. Idempotent.
func (s *NodeService) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	_, unlock, err := s.begin(id, nil, false, checked("target path", &target))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.host.Mounts.UnmountAll(target); err != nil {
		return nil, fmt.Errorf("unmount %s: %w", target, err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove target %s: %w", target, err)
	}
	if err := s.detachUnusedReadOnly(id); err != nil {
		return nil, err
	}
	klog.InfoS("volume unpublished", "volumeID", id, "target", target)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// detachUnusedReadOnly detaches the read-only devices block publishes made,
// once nothing binds them. A staged device is never among them: staging
// binds it (block) or mounts it (filesystem).
func (s *NodeService) detachUnusedReadOnly(id string) error {
	devs, err := s.host.Loops.Find(s.pool.ImagePath(id))
	if err != nil {
		return fmt.Errorf("look up loop devices of volume %s: %w", id, err)
	}
	if len(devs) == 0 {
		return nil
	}
	table, err := s.host.Mounts.Table()
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	for _, d := range devs {
		if d.ReadOnly && !volview.Used(table, d) {
			if err := s.host.Loops.Detach(d.Path); err != nil && !errors.Is(err, loop.ErrNotFound) {
				return fmt.Errorf("detach read-only %s of volume %s: %w", d.Path, id, err)
			}
		}
	}
	return nil
}

// otherTargets lists mount points other than the given ones.
func otherTargets(ms []mount.Info, skip ...string) []string {
	var out []string
	for _, m := range ms {
		if !slices.Contains(skip, m.MountPoint) {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// stageBlock binds dev at <staging>/device (idempotent).
func (s *NodeService) stageBlock(dev loop.Device, staging string) error {
	path := volview.StagedDevicePath(staging)
	table, err := s.host.Mounts.Table()
	if err != nil {
		return err
	}
	if m, ok := table.Top(path); ok {
		if volview.Binds(m, dev) {
			return nil
		}
		return alreadyExists("%s already holds %s, not %s", path, m.Source, dev.Path)
	}
	return s.bindDevice(dev, path)
}

// unstageBlock removes the staging bind of a block volume, if any. With a
// filesystem mounted at staging (a mount volume's), <staging>/device is a
// file of the user's in that filesystem, never ours: it is left alone.
func (s *NodeService) unstageBlock(staging string) error {
	table, err := s.host.Mounts.Table()
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	if _, ok := table.Top(staging); ok {
		return nil
	}
	path := volview.StagedDevicePath(staging)
	if err := s.host.Mounts.UnmountAll(path); err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
