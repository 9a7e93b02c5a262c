package dirpool

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/volume"
)

// ErrSnapshotDataGone: a snapshot's record stands but its data is not
// where the record says (on CephFS, removed from inside the volume).
var ErrSnapshotDataGone = volume.NewError(volume.ClassPrecondition, "the snapshot's data is gone")

// snapshotter is where a pool keeps its snapshots' data and how it makes,
// finds and destroys it; the commit protocol around it (snapshot.go) is
// the same for every one. Chosen at Open with the quota (openQuota):
//
//   - subvolumeSnaps (below): read-only btrfs subvolumes in
//     <dir>/.filevol/snaps, apart from their volumes;
//   - cephSnaps (snap_ceph.go): CephFS snapshots in each volume's own
//     .snap, which a volume deleted while it has some keeps alive.
//
// Plain pools use subvolumeSnaps' layout and never fill it
// (dirVolumes.checkSnapshot refuses first).
type snapshotter interface {
	// engine names how the data is made (volume.Snapshot.Engine).
	engine() string
	// dirOf opens the directory that holds the snapshots of the volume
	// whose root src is open.
	dirOf(src int) (int, error)
	// find opens the directory that holds s's data.
	find(s volume.Snapshot) (int, error)
	// take makes name in dir a read-only snapshot of the volume root src.
	take(src, dir int, name string) error
	// place renames the committed snapshot from to its own name to.
	place(dir int, from, to string) error
	// remove destroys the snapshot name in dir; nothing there is success.
	remove(dir int, name string) error
	// each calls fn with every directory that may hold snapshot data,
	// named where for errors, and its entries.
	each(fn func(dir int, where string, names []string) error) error
	// goneHint says, for a snapshot whose data is missing, what may have
	// removed it.
	goneHint() string
	// keep reports whether the volume whose root fd is open must be
	// held past its delete for its snapshots' sake (trash).
	keep(fd int) (bool, error)
	// tidy is the collector's pass over what keep held.
	tidy() error
}

// The layout of subvolumeSnaps.
const (
	snapsDir   = "snaps"
	snapEngine = "btrfs-snapshot"
)

// subvolumeSnaps keeps snapshots as read-only btrfs subvolumes:
//
//	<dir>/.filevol/snaps/<sid>       the read-only subvolume
//	<dir>/.filevol/snaps/.tmp-<sid>  one being made
//
// atomic and instant at any size, exact (owners, modes, timestamps),
// and independent of the volume: deleting the volume leaves them.
type subvolumeSnaps struct{ p *Pool }

func openSubvolumeSnaps(p *Pool) (*subvolumeSnaps, error) {
	if err := unix.Mkdirat(p.root, metaDir+"/"+snapsDir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	return &subvolumeSnaps{p: p}, nil
}

func (s *subvolumeSnaps) engine() string { return snapEngine }

func (s *subvolumeSnaps) dirOf(int) (int, error) { return s.p.metaFD(snapsDir) }

func (s *subvolumeSnaps) find(volume.Snapshot) (int, error) { return s.p.metaFD(snapsDir) }

func (s *subvolumeSnaps) take(src, dir int, name string) error {
	return snapshotSubvolume(src, dir, name, true)
}

func (s *subvolumeSnaps) place(dir int, from, to string) error {
	return unix.Renameat2(dir, from, dir, to, unix.RENAME_NOREPLACE)
}

// remove: a read-only subvolume cannot be moved to another directory
// (EROFS), so it is destroyed where it is.
func (s *subvolumeSnaps) remove(dir int, name string) error {
	if err := s.p.quota.destroy(dir, name); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

func (s *subvolumeSnaps) each(fn func(int, string, []string) error) error {
	names, dir, err := s.p.listMeta(snapsDir)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return fn(dir, metaDir+"/"+snapsDir, names)
}

func (s *subvolumeSnaps) goneHint() string {
	return fmt.Sprintf("it was a subvolume in %s/%s/%s", s.p.dir, metaDir, snapsDir)
}

// keep: a btrfs snapshot is a subvolume of its own; the volume goes.
func (s *subvolumeSnaps) keep(int) (bool, error) { return false, nil }

// tidy: nothing is held.
func (s *subvolumeSnaps) tidy() error { return nil }
