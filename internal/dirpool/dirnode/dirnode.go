package dirnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volume"
)

// Node is the node half of directory volumes (internal/dirpool): a
// volume is a directory of a pool this node mounts (a btrfs subvolume, a
// CephFS or plain directory); a stage and a publish each bind the
// volume's directory, opened beneath the pool without following a link
// (dirpool.OpenVolume), through its descriptor: what a pod did inside the
// volume cannot redirect the bind. It is served by internal/csi as a
// NodeBackend, which validates, locks and routes before calling it.
//
// The mount table is read and changed through hostos.Mounter, as the
// image kind's node half does, so that its answers are unit-tested on
// internal/hostos/fake; target directories are made and removed with os
// directly, as imagenode does too (the fake checks mount points on the
// test's disk).
type Node struct {
	pool   *dirpool.Pool
	mounts hostos.Mounter
	// kubeletDir: only binds under it are this node's (on a shared pool,
	// other nodes' on the same host are not); "" counts every bind.
	kubeletDir string
}

// New is the node half of the directory pool p, on a node whose kubelet
// keeps its mounts under kubeletDir; of h it uses the mounts alone.
func New(p *dirpool.Pool, h hostos.Host, kubeletDir string) *Node {
	return &Node{pool: p, mounts: h.Mounts, kubeletDir: kubeletDir}
}

func (d *Node) Dir() string                          { return d.pool.Dir() }
func (d *Node) Get(id string) (volume.Volume, error) { return d.pool.Get(id) }

// InUse reports whether a bind of the volume's directory is mounted here.
func (d *Node) InUse(id string) (bool, error) {
	binds, err := d.binds(id)
	return len(binds) > 0, err
}

// binds lists the mounts of the volume's subvolume: mounts of the pool's
// filesystem (its device numbers) whose root within it is the volume's
// directory.
func (d *Node) binds(id string) ([]mount.Info, error) {
	rec, err := d.pool.Record(id)
	if errors.Is(err, volume.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	table, err := d.mounts.Table()
	if err != nil {
		return nil, err
	}
	fsm, root, err := d.poolRoot(table)
	if err != nil {
		return nil, err
	}
	want := path.Join(root, rec.Path)
	var out []mount.Info
	under := "/"
	if d.kubeletDir != "" {
		under = d.kubeletDir
	}
	for _, m := range table.Under(under) {
		if m.Major == fsm.Major && m.Minor == fsm.Minor && m.Root == want {
			out = append(out, m)
		}
	}
	return out, nil
}

// poolRoot finds the mount that holds the pool's directory and the
// directory's path within the filesystem (mountinfo's root field of a
// bind of it).
func (d *Node) poolRoot(table mount.Table) (mount.Info, string, error) {
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

// Stage binds the volume's directory at the staging path (nosuid,
// nodev, read-only when the access mode allows no writer). The directory
// is on this node's pool already, so the bind is not needed to reach it:
// it is what the kernel shows of a stage, which the in-use record is
// checked against. Without it a staged, unpublished volume had no mount,
// and the node's reconcile (at start and at every garbage collection)
// took its record for a crash's leftover and dropped it, after which the
// controller deleted a volume kubelet still had staged.
func (d *Node) Stage(_ context.Context, vol volume.Volume, r volume.StageRequest) (string, error) {
	if r.Block {
		return "", fmt.Errorf("%w: a directory volume has no block access", volume.ErrInvalidArgument)
	}
	if err := d.bindAt(vol.ID, r.StagingPath, r.ReadOnly, r.MountFlags); err != nil {
		return "", err
	}
	return "directory volume bound at the staging path", nil
}

// Unstage unmounts the staging path; FAILED_PRECONDITION while the
// volume is still published here (the CO unpublishes first).
func (d *Node) Unstage(_ context.Context, id, staging string) error {
	binds, err := d.binds(id)
	if err != nil {
		return err
	}
	for _, m := range binds {
		if m.MountPoint != staging {
			return answer.FailedPrecondition("volume %s is still published at %s: unpublish it before unstaging", id, m.MountPoint)
		}
	}
	return d.mounts.UnmountAll(staging)
}

// Publish binds the volume's directory at the target with nosuid and
// nodev (and read-only when asked), making the target directory first.
// A target that holds the volume already is success (spec: idempotent).
func (d *Node) Publish(_ context.Context, vol volume.Volume, r volume.PublishRequest) error {
	if r.Block {
		return fmt.Errorf("%w: a directory volume has no block access", volume.ErrInvalidArgument)
	}
	if r.SingleWriter {
		binds, err := d.binds(vol.ID)
		if err != nil {
			return err
		}
		for _, m := range binds {
			if m.MountPoint != r.StagingPath && m.MountPoint != r.TargetPath {
				return answer.FailedPrecondition("volume %s is SINGLE_NODE_SINGLE_WRITER and already published at %s", vol.ID, m.MountPoint)
			}
		}
	}
	return d.bindAt(vol.ID, r.TargetPath, r.ReadOnly, r.MountFlags)
}

// bindAt binds the volume's directory at target, through a descriptor
// opened beneath the pool (never a path a pod could change), making the
// target directory first. A target that holds the volume already, as
// asked, is success; anything else mounted there is ALREADY_EXISTS.
func (d *Node) bindAt(id, target string, readOnly bool, flags []string) error {
	rec, err := d.pool.Record(id)
	if err != nil {
		return err
	}
	table, err := d.mounts.Table()
	if err != nil {
		return err
	}
	fsm, root, err := d.poolRoot(table)
	if err != nil {
		return err
	}
	if at := table.At(target); len(at) > 0 {
		top := at[len(at)-1]
		if top.Major != fsm.Major || top.Minor != fsm.Minor || top.Root != path.Join(root, rec.Path) {
			return answer.AlreadyExists("%s has something else mounted (%s %s), not volume %s", target, top.FSType, top.Root, id)
		}
		if top.ReadOnly() != readOnly {
			return answer.AlreadyExists("volume %s is mounted at %s with read-only=%t, not %t", id, target, top.ReadOnly(), readOnly)
		}
		return nil
	}
	if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make %s: %w", target, err)
	}
	f, err := d.pool.OpenVolume(id)
	if err != nil {
		return err
	}
	defer f.Close()
	opts := append([]string{"nosuid", "nodev"}, flags...)
	return d.mounts.Bind(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), target, readOnly, opts)
}

// Unpublish unmounts the target and removes it; a target already gone
// is success.
func (d *Node) Unpublish(_ context.Context, _, target string) error {
	if err := d.mounts.UnmountAll(target); err != nil {
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
func (d *Node) Stats(_ context.Context, vol volume.Volume, path string) ([]*csipb.VolumeUsage, error) {
	binds, err := d.binds(vol.ID)
	if err != nil {
		return nil, err
	}
	found := false
	for _, m := range binds {
		found = found || m.MountPoint == path
	}
	if !found {
		return nil, answer.NotFound("volume %s is not published at %s", vol.ID, path)
	}
	used, limit, err := d.pool.Usage(vol.ID)
	if err != nil {
		return nil, err
	}
	return []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: limit, Used: used, Available: max(limit-used, 0)}}, nil
}

// SizeNote says whether the volume's size is not enforced (a pool
// without quota); NodeGetVolumeHealth reports it (answer.NotedHealth).
func (d *Node) SizeNote(id string) string { return d.pool.SizeNote(id) }

// GuardNote says what the pool's quota guard repaired in the volume;
// NodeGetVolumeHealth reports it (answer.NotedHealth).
func (d *Node) GuardNote(id string) string { return d.pool.GuardNote(id) }

// Expand has nothing to do on the node: the controller raised the quota,
// online. A controller that deferred expansion to the node is not
// supported for directory volumes (the controller serves their pool).
func (d *Node) Expand(_ context.Context, vol volume.Volume, r volume.ExpandRequest) (int64, error) {
	if r.RequiredBytes > vol.CapacityBytes {
		return 0, answer.FailedPrecondition("volume %s has %d bytes; a directory volume grows by ControllerExpandVolume, not on the node", vol.ID, vol.CapacityBytes)
	}
	return vol.CapacityBytes, nil
}

// Health reports a volume whose directory is gone or was replaced.
func (d *Node) Health(_ context.Context, vol volume.Volume, _, _ string) ([]*csipb.VolumeHealth_VolumeHealthEntry, error) {
	out := answer.NotedHealth(d, vol.ID)
	f, err := d.pool.OpenVolume(vol.ID)
	if err != nil {
		return append(out, answer.HealthEntry(csipb.VolumeHealthErrorType_DATA_LOSS, "DirectoryMissing", err.Error())), nil
	}
	f.Close()
	return out, nil
}

// Traits are the directory kind's (dirpool.Traits).
func (d *Node) Traits() volume.Traits { return dirpool.Traits }
