package dirpool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// Snapshots are read-only btrfs snapshots of a volume's subvolume:
// atomic and instant at any size, exact (owners, modes, timestamps).
//
//	<dir>/.filevol/snapshots/<sid>.json  the record (recordstore)
//	<dir>/.filevol/snaps/<sid>           the read-only subvolume
//	<dir>/.filevol/snaps/.tmp-<sid>      one being made (no record: garbage)
//
// A restore or a clone is a writable snapshot of it (or of the source
// volume) made by Create, a volume with its own qgroup.
const (
	snapRecordsDir = "snapshots"
	snapsDir       = "snaps"
	snapEngine     = "btrfs-snapshot"
)

func validSnapshotID(id string) error {
	_, err := volid.ParseSnapshot(id)
	return err
}

func (p *Pool) openSnapshotStore() error {
	for _, d := range []string{snapRecordsDir, snapsDir} {
		if err := unix.Mkdirat(p.root, metaDir+"/"+d, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
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

// repairSnapshots destroys the subvolumes of snapshots that never
// committed, and renames committed ones into place.
func (p *Pool) repairSnapshots() error {
	names, dir, err := p.listMeta(snapsDir)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	for _, n := range names {
		sid, ok := cutTmp(n)
		if !ok {
			continue
		}
		if _, err := p.snaps.Get(sid); err == nil {
			if err := unix.Renameat2(dir, n, dir, sid, unix.RENAME_NOREPLACE); err != nil {
				return err
			}
			continue
		}
		if err := p.quota.destroy(dir, n); err != nil {
			return err
		}
	}
	return p.sweepSnapshots()
}

func cutTmp(n string) (string, bool) {
	const pre = ".tmp-"
	if len(n) > len(pre) && n[:len(pre)] == pre {
		return n[len(pre):], true
	}
	return "", false
}

func (p *Pool) snapshotRecord(id string) (volume.Snapshot, error) {
	if err := validSnapshotID(id); err != nil {
		return volume.Snapshot{}, fmt.Errorf("%w: %v", volume.ErrSnapshotNotFound, err)
	}
	return p.snaps.Get(id)
}

func (p *Pool) openSnapshot(s volume.Snapshot) (int, error) {
	return openBeneath(p.root, metaDir+"/"+snapsDir+"/"+s.ID)
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
	dir, err := p.metaFD(snapsDir)
	if err != nil {
		return volume.Snapshot{}, err
	}
	defer unix.Close(dir)
	tmp := ".tmp-" + sid
	if err := p.quota.destroy(dir, tmp); err != nil {
		return volume.Snapshot{}, err
	}
	if err := snapshotSubvolume(src, dir, tmp, true); err != nil {
		return volume.Snapshot{}, err
	}
	s := volume.Snapshot{Version: recordVersion, ID: sid, Name: req.Name, SourceVolumeID: v.ID,
		SizeBytes: v.CapacityBytes, RestoreBytes: v.RequestedBytes, Engine: snapEngine,
		Parameters: req.Parameters, Node: p.node, CreatedAt: time.Now().UTC()}
	if s.RestoreBytes >= s.SizeBytes {
		s.RestoreBytes = 0
	}
	fail := func(err error) (volume.Snapshot, error) {
		_ = p.quota.destroy(dir, tmp)
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
	if err := unix.Renameat2(dir, tmp, dir, sid, unix.RENAME_NOREPLACE); err != nil {
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
// destroys its subvolume; missing is success. A read-only subvolume
// cannot be moved to another directory (EROFS), so it is not trashed: a
// crash after the record's removal leaves a subvolume without a record in
// snaps/, which the garbage collector (sweepSnapshots) destroys. Volumes
// restored from it are independent subvolumes and keep their data.
func (p *Pool) DeleteSnapshot(_ context.Context, id string) error {
	s, err := p.snapshotRecord(id)
	if errors.Is(err, volume.ErrSnapshotNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	mark := p.snaps.Mark()
	if err := p.snaps.Remove(s.ID); err != nil {
		return err
	}
	if err := p.snaps.Synced(mark); err != nil {
		return err
	}
	return p.sweepSnapshots()
}

// sweepSnapshots destroys the subvolumes in snaps/ that no record names
// (deletes interrupted after their commit point); a ".tmp-" one with no
// record is a create before its commit. Repair at open also rolls
// committed ones forward (repairSnapshots); this sweep, safe while the
// pool is in use, leaves every ".tmp-" one alone.
func (p *Pool) sweepSnapshots() error {
	names, dir, err := p.listMeta(snapsDir)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var errs []error
	for _, n := range names {
		if _, tmp := cutTmp(n); tmp || validSnapshotID(n) != nil {
			continue
		}
		if _, err := p.snaps.Get(n); err == nil {
			continue
		}
		errs = append(errs, p.quota.destroy(dir, n))
	}
	return errors.Join(errs...)
}
