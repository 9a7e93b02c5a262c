package dirpool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// Snapshots: one record per snapshot in <dir>/.filevol/snapshots/<sid>.json
// (recordstore), and its data where the pool's snapshotter keeps it
// (snapshotter.go): a read-only btrfs subvolume in .filevol/snaps, or a
// CephFS snapshot in the volume's own .snap. Either way the data is
// made under the name ".tmp-<sid>" before the record commits and renamed
// to <sid> after, so that a crash at any instant leaves one of:
//
//	.tmp-<sid>, no record   a create before its commit: destroyed at repair
//	.tmp-<sid>, record      a create after its commit: renamed at repair
//	<sid>, no record        a delete after its commit: destroyed by the sweep
//
// A restore or a clone is made by Create from the snapshot's root
// (openSource): a writable btrfs snapshot of it, or a copy (copytree.go).
const snapRecordsDir = "snapshots"

func validSnapshotID(id string) error {
	_, err := volid.ParseSnapshot(id)
	return err
}

func (p *Pool) openSnapshotStore() error {
	if err := unix.Mkdirat(p.root, metaDir+"/"+snapRecordsDir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	s, err := recordstore.Open(recordstore.Config[volume.Snapshot]{
		Dir: filepath.Join(p.dir, metaDir, snapRecordsDir), Kind: "directory snapshot", Version: recordVersion,
		Valid: validSnapshotID, NotFound: volume.ErrSnapshotNotFound, Exists: volume.ErrAlreadyExists,
	})
	if err != nil {
		return err
	}
	p.snaps = s
	return nil
}

const tmpPrefix = ".tmp-"

func cutTmp(n string) (string, bool) {
	return strings.CutPrefix(n, tmpPrefix)
}

// repairSnapshots, at an open that holds the pool alone, destroys the
// data of snapshots that never committed (and what an interrupted clone
// left: ".tmp-" names no record has) and renames committed ones into
// place, then sweeps.
func (p *Pool) repairSnapshots() error {
	err := p.snapper.each(func(dir int, where string, names []string) error {
		for _, n := range names {
			sid, ok := cutTmp(n)
			if !ok {
				continue
			}
			if _, err := p.snaps.Get(sid); err == nil {
				if err := p.snapper.place(dir, n, sid); err != nil {
					return fmt.Errorf("roll snapshot %s forward in %s: %w", sid, where, err)
				}
				continue
			}
			if err := p.snapper.remove(dir, n); err != nil {
				return fmt.Errorf("destroy %s in %s: %w", n, where, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return p.sweepSnapshots()
}

// sweepSnapshots destroys the data of snapshots no record names (deletes
// interrupted after their commit point). Safe while the pool is in use:
// it leaves every ".tmp-" name alone (a create in flight).
func (p *Pool) sweepSnapshots() error {
	return p.snapper.each(func(dir int, _ string, names []string) error {
		var errs []error
		for _, n := range names {
			if validSnapshotID(n) != nil {
				continue // ".tmp-", or a pod's own CephFS snapshot
			}
			if _, err := p.snaps.Get(n); err == nil {
				continue
			}
			errs = append(errs, p.snapper.remove(dir, n))
		}
		return errors.Join(errs...)
	})
}

func (p *Pool) snapshotRecord(id string) (volume.Snapshot, error) {
	if err := validSnapshotID(id); err != nil {
		return volume.Snapshot{}, fmt.Errorf("%w: %v", volume.ErrSnapshotNotFound, err)
	}
	return p.snaps.Get(id)
}

// openSnapshot opens the root of the snapshot's data, for a restore.
func (p *Pool) openSnapshot(s volume.Snapshot) (int, error) {
	dir, err := p.snapper.find(s)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dir)
	fd, err := openBeneath(dir, s.ID)
	if errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("%w: the data of snapshot %s is gone (%s)", ErrSnapshotDataGone, s.ID, p.snapper.goneHint())
	}
	return fd, err
}

// CreateSnapshot makes a read-only snapshot of the source volume.
func (p *Pool) CreateSnapshot(_ context.Context, req volume.SnapshotRequest) (volume.Snapshot, error) {
	v, err := p.Record(req.SourceVolumeID)
	if err != nil {
		return volume.Snapshot{}, err
	}
	if err := p.quota.checkSnapshot(); err != nil {
		return volume.Snapshot{}, err
	}
	sid := p.SnapshotID(req.Name)
	if s, err := p.snaps.Get(sid); err == nil {
		if s.SourceVolumeID != req.SourceVolumeID {
			return volume.Snapshot{}, fmt.Errorf("%w: snapshot %q is of volume %s", volume.ErrAlreadyExists, req.Name, s.SourceVolumeID)
		}
		return s, nil
	}
	src, err := p.openVolume(v)
	if err != nil {
		return volume.Snapshot{}, err
	}
	defer unix.Close(src)
	dir, err := p.snapper.dirOf(src)
	if err != nil {
		return volume.Snapshot{}, err
	}
	defer unix.Close(dir)
	tmp := tmpPrefix + sid
	// What a failed earlier attempt left: start over.
	if err := p.snapper.remove(dir, tmp); err != nil {
		return volume.Snapshot{}, err
	}
	if err := p.snapper.take(src, dir, tmp); err != nil {
		return volume.Snapshot{}, err
	}
	s := volume.Snapshot{Version: recordVersion, ID: sid, Name: req.Name, SourceVolumeID: v.ID,
		SizeBytes: v.CapacityBytes, RestoreBytes: v.RequestedBytes, Engine: p.snapper.engine(),
		Parameters: req.Parameters, Node: p.node, CreatedAt: time.Now().UTC()}
	if s.RestoreBytes >= s.SizeBytes {
		s.RestoreBytes = 0
	}
	fail := func(err error) (volume.Snapshot, error) {
		_ = p.snapper.remove(dir, tmp)
		return volume.Snapshot{}, err
	}
	if err := unix.Syncfs(p.root); err != nil {
		return fail(err)
	}
	draft, err := p.snaps.Prepare(s)
	if err != nil {
		return fail(err)
	}
	if err := draft.Commit(); err != nil {
		draft.Abandon()
		return fail(err)
	}
	if err := p.snapper.place(dir, tmp, sid); err != nil {
		draft.Abandon()
		return fail(err)
	}
	if err := unix.Syncfs(p.root); err != nil {
		return volume.Snapshot{}, err
	}
	return s, draft.Durable()
}

// GetSnapshot returns the snapshot's record.
func (p *Pool) GetSnapshot(id string) (volume.Snapshot, error) { return p.snapshotRecord(id) }

// GetSnapshotByName returns the snapshot called name.
func (p *Pool) GetSnapshotByName(name string) (volume.Snapshot, error) {
	return p.snapshotRecord(p.SnapshotID(name))
}

// ListSnapshots lists the snapshots in ID order.
func (p *Pool) ListSnapshots() []volume.Snapshot { return p.snaps.List() }

// DeleteSnapshot removes the snapshot's record (the commit point), then
// destroys its data; missing is success. A crash after the record's
// removal leaves data without a record, which the sweep destroys.
// Volumes restored from it are independent and keep their data.
func (p *Pool) DeleteSnapshot(_ context.Context, id string) error {
	s, err := p.snapshotRecord(id)
	if errors.Is(err, volume.ErrSnapshotNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	dir, derr := p.snapper.find(s)
	if derr == nil {
		defer unix.Close(dir)
	}
	mark := p.snaps.Mark()
	if err := p.snaps.Remove(s.ID); err != nil {
		return err
	}
	if err := p.snaps.Synced(mark); err != nil {
		return err
	}
	if derr == nil {
		if err := p.snapper.remove(dir, s.ID); err != nil {
			return err
		}
	}
	p.kick() // a CephFS volume held for its snapshots may go now (snap_ceph.go)
	return p.sweepSnapshots()
}
