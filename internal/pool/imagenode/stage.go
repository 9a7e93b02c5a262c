package imagenode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/reading"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// Stage attaches the image to a loop device and, for mount volumes,
// formats it if it carries no filesystem and mounts it at the staging
// path. For block volumes the device bound at <staging>/device is the
// staged state. It returns the device.
func (b *Node) Stage(ctx context.Context, vol volume.Volume, r volume.StageRequest) (string, error) {
	id := vol.ID
	// An encrypted volume's key first: a Secret that cannot open it
	// leaves the volume untouched (crypt.go).
	vol, key, err := b.stageKey(vol, r)
	if err != nil {
		return "", err
	}
	defer clear(key)
	// Made if it is a blank volume's first use, and durable before
	// anything can write into it (pool/pending.go).
	vol, err = b.pool.CommitImage(vol)
	if err == nil && !b.pool.ImageExists(id) {
		err = answer.FailedPrecondition("image file %s of volume %s is missing", b.pool.ImagePath(id), id)
	}
	if err != nil {
		return "", err
	}
	dev, attached, err := b.ensureLoop(ctx, b.pool.ImagePath(id), r.ReadOnly, b.fence, r.Unrecorded)
	if err != nil {
		return "", err
	}
	err = b.stageDevice(ctx, vol, dev, r, key)
	if err == nil && attached && b.gone(id) {
		// Staged an image a concurrent DeleteVolume was removing: undone.
		err = answer.NotFound("volume %s was deleted while it was being staged", id)
		if uerr := b.host.Mounts.UnmountAll(r.StagingPath); uerr != nil {
			klog.ErrorS(uerr, "unmount a volume deleted while staged", "stagingPath", r.StagingPath)
		}
	}
	if err != nil {
		if attached {
			// Nothing half-made: the device we attached goes away with the
			// failure (and so, in the service, this node's record of it).
			b.detachAfterFailure(dev, "stage")
		}
		return "", err
	}
	return dev.Path, nil
}

// stageDevice makes the attached dev the staged state at staging: its size
// caught up with the image, then bound (block) or mounted (filesystem).
func (b *Node) stageDevice(ctx context.Context, vol volume.Volume, dev loop.Device, r volume.StageRequest, key []byte) error {
	// An image grown (ControllerExpandVolume) while its device stayed attached.
	dev, err := b.refreshLoopSize(dev, b.pool.ImagePath(vol.ID))
	if err != nil {
		return err
	}
	if r.Block {
		return b.stageBlock(dev, r.StagingPath)
	}
	return b.stageFilesystem(ctx, vol, dev, r.StagingPath, r.FSType, r.MountFlags, r.ReadOnly, key)
}

// stageFilesystem mounts dev at staging, formatting it first only when it
// carries no signature at all (filevol never reformats data). key is an
// encrypted volume's data key (nil: in clear): its ext4 is made able to
// hold encrypted directories, and unlocked once mounted (unlockData).
func (b *Node) stageFilesystem(ctx context.Context, vol volume.Volume, dev loop.Device, staging, fsType string, flags []string, readOnly bool, key []byte) error {
	encrypt := key != nil
	// The staging path alone: the whole table grows with the node's volumes.
	top, ok, err := topMount(b.host, staging)
	if err != nil {
		return err
	}
	if ok {
		if volview.Mounts(top, dev) && encrypt {
			return b.unlockData(vol, staging, key, readOnly) // idempotent too
		}
		if volview.Mounts(top, dev) {
			return nil // already staged: idempotent
		}
		return answer.AlreadyExists("staging path %s already has %s (%s) mounted, which is not volume %s", staging, top.Source, top.FSType, vol.ID)
	}
	found, err := b.host.FS.Probe(ctx, dev.Path)
	if err != nil {
		return fmt.Errorf("probe %s of volume %s: %w", dev.Path, vol.ID, err)
	}
	if found != "" && b.pool.NodeState().Format.IsSet(vol.ID) {
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
		return answer.FailedPrecondition("volume %s has no filesystem yet and cannot be formatted when staged read-only", vol.ID)
	case found == "" && encrypt && want != "ext4":
		return answer.FailedPrecondition("volume %s is encrypted, which needs ext4, not %s", vol.ID, want)
	case found == "":
		if err := b.pool.NodeState().Format.Set(vol.ID); err != nil {
			return fmt.Errorf("mark volume %s as formatting: %w", vol.ID, err)
		}
		if err := b.host.FS.Format(ctx, dev.Path, want, fs.FormatOptions{Encrypt: encrypt}); err != nil {
			return fmt.Errorf("format %s of volume %s as %s: %w", dev.Path, vol.ID, want, err)
		}
		if err := b.pool.NodeState().Format.Clear(vol.ID); err != nil {
			return fmt.Errorf("mark volume %s as formatted: %w", vol.ID, err)
		}
		klog.InfoS("formatted", "volumeID", vol.ID, "device", dev.Path, "fsType", want)
		found, grow = want, false
	case !slices.Contains(fs.Types, found):
		return answer.FailedPrecondition("%s of volume %s carries a %q signature; filevol formats only empty devices and never overwrites data", dev.Path, vol.ID, found)
	case fsType != "" && found != fsType:
		return answer.FailedPrecondition("volume %s holds a %s filesystem but %s was requested", vol.ID, found, fsType)
	}
	if grow {
		if err := b.growBeforeMount(ctx, vol, dev, found); err != nil { // grow.go
			return err
		}
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return fmt.Errorf("create staging path: %w", err)
	}
	if err := b.host.Mounts.Mount(dev.Path, staging, found, mountOptions(found, flags, readOnly)); err != nil {
		return fmt.Errorf("mount %s at %s: %w", dev.Path, staging, err)
	}
	if grow {
		if err := b.growAfterMount(ctx, vol, dev, staging, found); err != nil {
			// Unmounted, so that the retry finds an unstaged volume and grows it.
			if uerr := b.host.Mounts.UnmountAll(staging); uerr != nil {
				klog.ErrorS(uerr, "unmount after failed growth", "stagingPath", staging)
			}
			return err
		}
	}
	if encrypt {
		if err := b.unlockData(vol, staging, key, readOnly); err != nil {
			// Unmounted, so that the volume is never staged without its
			// encrypted directory, and the retry starts over.
			if uerr := b.host.Mounts.UnmountAll(staging); uerr != nil {
				klog.ErrorS(uerr, "unmount after a failed unlock", "stagingPath", staging)
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
	opts := append(append([]string(nil), flags...), volume.AlwaysMountOptions...)
	if fsType == "xfs" {
		opts = append(opts, "nouuid")
	}
	if readOnly {
		opts = append(opts, "ro")
	}
	return opts
}

// stageBlock binds dev at <staging>/device (idempotent).
func (b *Node) stageBlock(dev loop.Device, staging string) error {
	path := volview.StagedDevicePath(staging)
	m, ok, err := topMount(b.host, path)
	if err != nil {
		return err
	}
	if ok {
		if volview.Binds(m, dev) {
			return nil
		}
		return answer.AlreadyExists("%s already holds %s, not %s", path, m.Source, dev.Path)
	}
	return b.bindDevice(dev, path)
}

// Unstage unmounts the staging path and detaches the volume's loop
// devices. It refuses while the volume is still published somewhere (the
// CO must unpublish first).
func (b *Node) Unstage(ctx context.Context, id, staging string) error {
	u, err := reading.ImageUsage(b.host, b.pool.ImagePath(id))
	if err != nil {
		return err
	}
	// A device of this node's left on a dead client's file is not found by
	// identity (dead.go): its uses count, and it goes too.
	dead, err := b.unreachableStaged(id, staging)
	if err != nil {
		return err
	}
	var elsewhere []string
	for _, x := range append(u.Uses, dead.Uses...) {
		if !volview.Within(x.MountPoint, staging) {
			elsewhere = append(elsewhere, x.MountPoint)
		}
	}
	if len(elsewhere) > 0 {
		return answer.FailedPrecondition("volume %s is still published at %v; unpublish it first", id, elsewhere)
	}
	if err := b.lockData(id, staging, u); err != nil { // crypt.go
		return err
	}
	if err := b.unstageBlock(staging); err != nil {
		return err
	}
	if err := b.host.Mounts.UnmountAll(staging); err != nil {
		return fmt.Errorf("unmount %s: %w", staging, err)
	}
	if u.Attached() {
		if err := b.detachSettled(ctx, func() error { return b.host.Loops.DetachFile(b.pool.ImagePath(id)) }); err != nil {
			return fmt.Errorf("detach loop devices of volume %s: %w", id, err)
		}
	}
	for _, d := range dead.Devices {
		if err := b.detachSettled(ctx, func() error { return b.host.Loops.DetachUnreachable(d) }); err != nil {
			return fmt.Errorf("detach loop device %s of volume %s, left on a dead client's file %s: %w", d.Path, id, d.BackingFile, err)
		}
		klog.InfoS("detached a loop device left on a dead client's file", "device", d.Path, "volumeID", id, "image", d.BackingFile)
	}
	return nil
}

// unreachableStaged returns this node's devices of the volume that the
// kernel cannot identify any more, with their uses (unreachableOf).
func (b *Node) unreachableStaged(id, staging string) (volview.Usage, error) {
	devs, err := b.host.Loops.Named(b.pool.ImagePath(id))
	if err != nil {
		return volview.Usage{}, fmt.Errorf("look up loop devices named %s: %w", b.pool.ImagePath(id), err)
	}
	// Almost every unstage finds none: the mount table is read only for one.
	devs = slices.DeleteFunc(devs, func(d loop.Device) bool { did, ok := b.unreachableImage(d); return !ok || did != id })
	if len(devs) == 0 {
		return volview.Usage{}, nil
	}
	table, err := b.host.Mounts.Table()
	if err != nil {
		return volview.Usage{}, fmt.Errorf("read mount table: %w", err)
	}
	dead := b.unreachableOf(id, staging, devs, table)
	if len(dead) == 0 {
		return volview.Usage{}, nil
	}
	return volview.Of(dead, table), nil
}

// Busy retries of detachSettled: a device whose filesystem was just
// unmounted can stay claimed for a moment when another mount namespace
// holds a copy of the mount: a container being created starts as a copy
// of the host's mount table until it pivots into its root and drops the
// rest. Short enough that kubelet's own retry stays the remedy for a
// device that is really in use.
const (
	busyRetries = 10
	busyWait    = 100 * time.Millisecond
)

// detachSettled runs detach, retrying while it finds a device busy, for up
// to busyRetries×busyWait.
func (b *Node) detachSettled(ctx context.Context, detach func() error) error {
	err := detach()
	for i := 0; i < busyRetries && errors.Is(err, loop.ErrBusy); i++ {
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(busyWait):
		}
		err = detach()
	}
	return err
}

// unstageBlock removes the staging bind of a block volume, if any. With a
// filesystem mounted at staging (a mount volume's), <staging>/device is a
// file of the user's in that filesystem, never ours: it is left alone.
func (b *Node) unstageBlock(staging string) error {
	table, err := b.host.Mounts.Table()
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	if _, ok := table.Top(staging); ok {
		return nil
	}
	path := volview.StagedDevicePath(staging)
	if err := b.host.Mounts.UnmountAll(path); err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
