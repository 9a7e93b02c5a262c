package imagenode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// Publish bind-mounts the staged filesystem into the target directory,
// or the loop device node onto the target file for block volumes;
// read-only requests get a read-only bind, or a read-only device.
func (b *Node) Publish(ctx context.Context, vol volume.Volume, r volume.PublishRequest) error {
	if r.Block {
		return b.publishBlock(ctx, vol.ID, r.StagingPath, r.TargetPath, r.ReadOnly, r.SingleWriter)
	}
	return b.publishMount(vol.ID, r.StagingPath, publishSource(vol, r.StagingPath), r.TargetPath, r.ReadOnly, r.SingleWriter, r.MountFlags)
}

// publishMount binds source, the staging mount or a directory of it
// (publishSource), onto target.
func (b *Node) publishMount(id, staging, source, target string, readOnly, single bool, flags []string) error {
	// The staging and target paths' mounts alone, and the one device
	// staged: nothing here grows with the node's volumes.
	top, ok, err := topMount(b.host, staging)
	if err != nil {
		return err
	}
	var dev loop.Device
	staged := false
	if ok && !volview.IsDeviceBind(top) {
		if dev, staged, err = b.deviceOf(top, b.pool.ImagePath(id)); err != nil {
			return err
		}
	}
	if !staged {
		return answer.FailedPrecondition("volume %s is not staged at %s; call NodeStageVolume first", id, staging)
	}
	cur, ok, err := topMount(b.host, target)
	if err != nil {
		return err
	}
	if ok {
		if volview.Mounts(cur, dev) && slices.Contains(cur.Options, "ro") == readOnly {
			return nil // already published: idempotent
		}
		return answer.AlreadyExists("target %s already has %s mounted (read-only: %v), incompatible with this request for volume %s",
			target, cur.Source, slices.Contains(cur.Options, "ro"), id)
	}
	if single {
		table, err := b.host.Mounts.Table()
		if err != nil {
			return err
		}
		if others := otherTargets(volview.MountsOf(table, dev), staging, target); len(others) > 0 {
			return answer.FailedPrecondition("volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %v", id, others)
		}
	}
	if source != staging {
		if st, err := os.Lstat(source); err != nil || !st.IsDir() {
			return answer.FailedPrecondition("volume %s is staged at %s without its encrypted directory %s; unstage and stage it again", id, staging, source)
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return fmt.Errorf("create target %s: %w", target, err)
	}
	if err := b.host.Mounts.Bind(source, target, readOnly, flags); err != nil {
		return fmt.Errorf("bind %s to %s: %w", source, target, err)
	}
	return nil
}

func (b *Node) publishBlock(ctx context.Context, id, staging, target string, readOnly, single bool) error {
	image := b.pool.ImagePath(id)
	devs, err := b.host.Loops.Find(image)
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return answer.FailedPrecondition("volume %s is not staged on this node (no loop device backs %s); call NodeStageVolume first", id, image)
	}
	table, err := b.host.Mounts.Table()
	if err != nil {
		return err
	}
	if cur, ok := table.Top(target); ok {
		if d, ok := volview.DeviceOf(devs, cur); ok && volview.IsDeviceBind(cur) && d.ReadOnly == readOnly {
			return nil // already published: idempotent
		}
		return answer.AlreadyExists("target %s already has %s mounted, incompatible with this request for volume %s", target, cur.Source, id)
	}
	if single {
		var others []string
		for _, d := range devs {
			others = append(others, otherTargets(volview.BindsOf(table, d), volview.StagedDevicePath(staging), target)...)
		}
		if len(others) > 0 {
			return answer.FailedPrecondition("volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %v", id, others)
		}
	}
	dev, attached, err := b.ensureLoop(ctx, image, readOnly, false, false)
	if err != nil {
		return err
	}
	if err := b.bindDevice(dev, target); err != nil {
		if attached {
			b.detachAfterFailure(dev, "publish")
		}
		return err
	}
	return nil
}

// bindDevice binds the device node onto target, a regular file it creates.
// An empty directory there (some COs pre-create the target) is replaced.
func (b *Node) bindDevice(dev loop.Device, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return fmt.Errorf("create parent of %s: %w", target, err)
	}
	if st, err := os.Lstat(target); err == nil && st.IsDir() {
		if err := os.Remove(target); err != nil {
			return answer.FailedPrecondition("target %s of a block volume is a non-empty directory: %v", target, err)
		}
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return fmt.Errorf("create target file %s: %w", target, err)
	}
	f.Close()
	if err := b.host.Mounts.Bind(dev.Path, target, false, nil); err != nil {
		return fmt.Errorf("bind %s to %s: %w", dev.Path, target, err)
	}
	return nil
}

// Unpublish unmounts the target and removes it (spec: the SP MUST delete
// what it created). Read-only devices made for a block publish are
// detached once no bind uses them.
func (b *Node) Unpublish(ctx context.Context, id, target string) error {
	if err := b.host.Mounts.UnmountAll(target); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove target %s: %w", target, err)
	}
	return b.detachUnusedReadOnly(id)
}

// detachUnusedReadOnly detaches the read-only devices block publishes made,
// once nothing binds them. A staged device is never among them: staging
// binds it (block) or mounts it (filesystem).
func (b *Node) detachUnusedReadOnly(id string) error {
	devs, err := b.host.Loops.Find(b.pool.ImagePath(id))
	if err != nil {
		return fmt.Errorf("look up loop devices of volume %s: %w", id, err)
	}
	if len(devs) == 0 {
		return nil
	}
	table, err := b.host.Mounts.Table()
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	for _, d := range devs {
		if d.ReadOnly && !volview.Used(table, d) {
			if err := b.host.Loops.Detach(d.Path); err != nil && !errors.Is(err, loop.ErrNotFound) {
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
