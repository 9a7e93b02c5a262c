package pool

import (
	"errors"
	"os"
	"sort"
)

// Orphans is what a scan of the pool finds out of place. Open already
// repairs what a crash leaves (see the package doc); a periodic scan finds
// what appeared since — by hand, or through a bug — and reports it.
type Orphans struct {
	// RecordsWithoutImage are volume IDs whose image file is gone: the
	// volume's data is lost (reported, the record is kept for the operator).
	RecordsWithoutImage []string
	// ImagesWithoutRecord are volume IDs with an image but no record: they
	// might hold data, so they are quarantined, never deleted.
	ImagesWithoutRecord []string
	// TempFiles are ".tmp-" files: in-flight operations, or debris of one
	// that crashed (Open removes those when it holds the pool alone).
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
		if !s.Records[id] {
			o.ImagesWithoutRecord = append(o.ImagesWithoutRecord, id)
		}
	}
	for id := range im.tmp {
		o.TempFiles = append(o.TempFiles, tmpPrefix+id+imgSuffix)
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
// <dir>/quarantine. The caller holds the volume's lock and has checked
// that the record is still missing.
func (p *Pool) QuarantineImage(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if _, err := os.Stat(p.vols.Path(id)); err == nil {
		return nil // a record appeared: not an orphan
	}
	return p.quarantine(id + imgSuffix)
}

// VolumesDir is the directory holding images and records; loop devices
// whose backing file is inside it belong to the pool.
func (p *Pool) VolumesDir() string { return p.vdir }
