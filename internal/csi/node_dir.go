package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
)

// dirNode is the node half of directory volumes (internal/dirpool): a
// volume is a btrfs subvolume of a pool on this node, so there is nothing
// to stage, and a publish binds the subvolume's directory, opened beneath
// the pool without following a link (dirpool.OpenVolume), through its
// descriptor: what a pod did inside the volume cannot redirect the bind.
type dirNode struct {
	pool *dirpool.Pool
}

var _ NodeBackend = (*dirNode)(nil)

func (d *dirNode) Dir() string                        { return d.pool.Dir() }
func (d *dirNode) Get(id string) (pool.Volume, error) { return d.pool.Get(id) }

// InUse reports whether a bind of the volume's directory is mounted here.
func (d *dirNode) InUse(id string) (bool, error) {
	binds, err := d.binds(id)
	return len(binds) > 0, err
}

// binds lists the mounts of the volume's subvolume: mounts of the pool's
// filesystem (its device numbers) whose root within it is the volume's
// directory.
func (d *dirNode) binds(id string) ([]mount.Info, error) {
	rec, err := d.pool.Record(id)
	if errors.Is(err, pool.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	table, err := mount.Read()
	if err != nil {
		return nil, err
	}
	fsm, root, err := d.poolRoot(table)
	if err != nil {
		return nil, err
	}
	want := path.Join(root, rec.Path)
	var out []mount.Info
	for _, m := range table.Under("/") {
		if m.Major == fsm.Major && m.Minor == fsm.Minor && m.Root == want {
			out = append(out, m)
		}
	}
	return out, nil
}

// poolRoot finds the mount that holds the pool's directory and the
// directory's path within the filesystem (mountinfo's root field of a
// bind of it).
func (d *dirNode) poolRoot(table mount.Table) (mount.Info, string, error) {
	dir := d.pool.Dir()
	var best mount.Info
	found := false
	for _, m := range table.Under("/") {
		if (dir == m.MountPoint || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPoint, "/")+"/")) &&
			(!found || len(m.MountPoint) > len(best.MountPoint)) {
			best, found = m, true
		}
	}
	if !found {
		return mount.Info{}, "", fmt.Errorf("no mount holds the directory pool %s", dir)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(dir, best.MountPoint), "/")
	return best, path.Join(best.Root, rel), nil
}

// Stage has nothing to do: the directory is on this node's pool already.
// The in-use record the node service keeps is all a stage leaves.
func (d *dirNode) Stage(_ context.Context, vol pool.Volume, r StageRequest) (string, error) {
	if r.Block {
		return "", fmt.Errorf("%w: a directory volume has no block access", pool.ErrInvalidArgument)
	}
	return "(directory volume: nothing to stage)", nil
}

// Unstage has nothing to undo.
func (d *dirNode) Unstage(context.Context, string, string) error { return nil }

// Publish binds the volume's directory at the target with nosuid and
// nodev (and read-only when asked), making the target directory first.
// A target that holds the volume already is success (spec: idempotent).
func (d *dirNode) Publish(_ context.Context, vol pool.Volume, r PublishRequest) error {
	if r.Block {
		return fmt.Errorf("%w: a directory volume has no block access", pool.ErrInvalidArgument)
	}
	rec, err := d.pool.Record(vol.ID)
	if err != nil {
		return err
	}
	table, err := mount.Read()
	if err != nil {
		return err
	}
	fsm, root, err := d.poolRoot(table)
	if err != nil {
		return err
	}
	if at := table.At(r.TargetPath); len(at) > 0 {
		top := at[len(at)-1]
		if top.Major != fsm.Major || top.Minor != fsm.Minor || top.Root != path.Join(root, rec.Path) {
			return alreadyExists("target %s has something else mounted (%s %s), not volume %s", r.TargetPath, top.FSType, top.Root, vol.ID)
		}
		if top.ReadOnly() != r.ReadOnly {
			return alreadyExists("volume %s is published at %s with read-only=%t, not %t", vol.ID, r.TargetPath, top.ReadOnly(), r.ReadOnly)
		}
		return nil
	}
	if r.SingleWriter {
		binds, err := d.binds(vol.ID)
		if err != nil {
			return err
		}
		if len(binds) > 0 {
			return failedPrecondition("volume %s is SINGLE_NODE_SINGLE_WRITER and already published at %s", vol.ID, binds[0].MountPoint)
		}
	}
	if err := os.Mkdir(r.TargetPath, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make target %s: %w", r.TargetPath, err)
	}
	f, err := d.pool.OpenVolume(vol.ID)
	if err != nil {
		return err
	}
	defer f.Close()
	opts := append([]string{"nosuid", "nodev"}, r.MountFlags...)
	return mount.Bind(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), r.TargetPath, r.ReadOnly, opts)
}

// Unpublish unmounts the target and removes it; a target already gone
// is success.
func (d *dirNode) Unpublish(_ context.Context, _, target string) error {
	if err := mount.UnmountAll(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove target %s: %w", target, err)
	}
	return nil
}

// Stats reports the volume's qgroup: bytes referenced of the limit, as of
// the pool filesystem's last commit. Inodes are not limited by a qgroup
// and not reported.
func (d *dirNode) Stats(_ context.Context, vol pool.Volume, path string) ([]*csipb.VolumeUsage, error) {
	binds, err := d.binds(vol.ID)
	if err != nil {
		return nil, err
	}
	found := false
	for _, m := range binds {
		found = found || m.MountPoint == path
	}
	if !found {
		return nil, notFound("volume %s is not published at %s", vol.ID, path)
	}
	used, limit, err := d.pool.Usage(vol.ID)
	if err != nil {
		return nil, err
	}
	return []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: limit, Used: used, Available: max(limit-used, 0)}}, nil
}

// Expand has nothing to do on the node: the controller raised the quota,
// online. A controller that deferred expansion to the node is not
// supported for directory volumes (the controller serves their pool).
func (d *dirNode) Expand(_ context.Context, vol pool.Volume, r ExpandRequest) (int64, error) {
	if r.RequiredBytes > vol.CapacityBytes {
		return 0, failedPrecondition("volume %s has %d bytes; a directory volume grows by ControllerExpandVolume, not on the node", vol.ID, vol.CapacityBytes)
	}
	return vol.CapacityBytes, nil
}

// Health reports a volume whose directory is gone or was replaced.
func (d *dirNode) Health(_ context.Context, vol pool.Volume, _, _ string) ([]*csipb.VolumeHealth_VolumeHealthEntry, error) {
	f, err := d.pool.OpenVolume(vol.ID)
	if err != nil {
		return []*csipb.VolumeHealth_VolumeHealthEntry{healthEntry(csipb.VolumeHealthErrorType_DATA_LOSS, "DirectoryMissing", err.Error())}, nil
	}
	f.Close()
	return nil, nil
}
