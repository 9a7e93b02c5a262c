package pool

import (
	"errors"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Orphans is what a scan of the pool finds out of place. Open already
// repairs what a crash leaves (see the package doc); a periodic scan finds
// what appeared since — by hand, or through a bug — and reports it.
type Orphans struct {
	// RecordsWithoutImage are volume IDs whose image file is gone: the
	// volume's data is lost (reported, the record is kept for the operator).
	RecordsWithoutImage []string
	// ImagesWithoutRecord are volume IDs with an image but no record: they
	// might hold data, so they are quarantined, never deleted. On a shared
	// pool, only those unchanged for Options.OrphanGrace (see
	// QuarantineImage).
	ImagesWithoutRecord []string
	// TempFiles are ".tmp-" files: in-flight operations, or debris of one
	// that crashed (Open removes its owner's when no other process of the
	// owner has the pool open). Every owner's.
	TempFiles []string
	// Quarantined are the files waiting in <dir>/quarantine for an operator.
	Quarantined []string
}

// Count is the number of orphans that need an operator's attention.
func (o Orphans) Count() int {
	return len(o.RecordsWithoutImage) + len(o.ImagesWithoutRecord) + len(o.Quarantined)
}

// FindOrphans scans the pool without changing it. Callers that act on a
// finding lock the volume and check again: an in-flight create briefly
// shows a record whose image is still a temp file.
func (p *Pool) FindOrphans() (Orphans, error) {
	s, im, err := p.scanVolumes()
	if err != nil {
		return Orphans{}, err
	}
	var o Orphans
	for id := range s.Records {
		// A pending volume has no image until its first use (pending.go).
		if !im.has(id) && !p.pending(id) {
			o.RecordsWithoutImage = append(o.RecordsWithoutImage, id)
		}
	}
	for id := range im.present {
		if !s.Records[id] && p.settled(id) {
			o.ImagesWithoutRecord = append(o.ImagesWithoutRecord, id)
		}
	}
	for _, m := range []map[string][]string{im.own, im.others} {
		for _, names := range m {
			o.TempFiles = append(o.TempFiles, names...)
		}
	}
	o.TempFiles = append(o.TempFiles, s.TempRecords...)
	entries, err := os.ReadDir(p.qdir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Orphans{}, err
	}
	for _, e := range entries {
		o.Quarantined = append(o.Quarantined, e.Name())
	}
	for _, l := range [][]string{o.RecordsWithoutImage, o.ImagesWithoutRecord, o.TempFiles, o.Quarantined} {
		sort.Strings(l)
	}
	return o, nil
}

// QuarantineImage moves the image of a volume that has no record into
// <dir>/quarantine, and reports whether it did. The caller holds the
// volume's lock and has checked that the record is still missing; a
// record that appeared meanwhile, an image gone meanwhile (another node's
// sweep moved it) or, on a shared pool, one changed within
// Options.OrphanGrace, is left where it is (false).
func (p *Pool) QuarantineImage(id string) (bool, error) {
	if err := validID(id); err != nil {
		return false, err
	}
	if _, err := os.Stat(p.vols.Path(id)); err == nil {
		return false, nil // a record appeared: not an orphan
	}
	if !p.settled(id) {
		return false, nil
	}
	err := p.quarantine(id + imgSuffix)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

// settled reports whether the image of volume id may be taken for an
// orphan when no record is seen beside it. On a node-local pool always:
// every create commits its record before the image gets its name, and
// every delete moves the image aside before the record goes, all in one
// host's coherent view. On a shared pool, another host's create may have
// committed a record that this host's view of the directory does not
// show yet (NFS and FUSE clients cache lookups, negative ones included),
// so only an image unchanged for the grace period is: the rename that
// gives an image its name sets its ctime, as every write to it does, so
// an image in flight, or in use, is never that old.
func (p *Pool) settled(id string) bool {
	if !p.opts.Shared {
		return true
	}
	var st unix.Stat_t
	if err := unix.Stat(p.imagePath(id), &st); err != nil {
		return false
	}
	grace := p.opts.OrphanGrace
	if grace <= 0 {
		grace = DefaultOrphanGrace
	}
	return time.Since(time.Unix(st.Ctim.Unix())) > grace
}

// VolumesDir is the directory holding images and records; loop devices
// whose backing file is inside it belong to the pool.
func (p *Pool) VolumesDir() string { return p.vdir }
