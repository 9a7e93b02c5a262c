package pool

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// dirState is what one read of <dir>/volumes found, by volume ID.
type dirState struct {
	records, images, tmpImages map[string]bool
	// tmpRecords are unpublished records (.tmp-<id>.json.<random>).
	tmpRecords []string
}

// scan classifies the names in the volumes directory. Names that are not
// ours are logged and left alone: the directory is the operator's too.
func (p *Pool) scan() (dirState, error) { return scanDir(p.vdir, validID) }

// scanDir classifies the names in one pool directory (volumes/ or
// snapshots/) whose IDs valid accepts.
func scanDir(dir string, valid func(string) error) (dirState, error) {
	f, err := os.Open(dir)
	if err != nil {
		return dirState{}, err
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return dirState{}, err
	}
	s := dirState{records: map[string]bool{}, images: map[string]bool{}, tmpImages: map[string]bool{}}
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, tmpPrefix); ok {
			if id, ok := strings.CutSuffix(rest, imgSuffix); ok && valid(id) == nil {
				s.tmpImages[id] = true
				continue
			}
			if id, _, ok := strings.Cut(rest, recSuffix+"."); ok && valid(id) == nil {
				s.tmpRecords = append(s.tmpRecords, name)
				continue
			}
		} else if id, ok := strings.CutSuffix(name, recSuffix); ok && valid(id) == nil {
			s.records[id] = true
			continue
		} else if id, ok := strings.CutSuffix(name, imgSuffix); ok && valid(id) == nil {
			s.images[id] = true
			continue
		} else if id, ok := strings.CutSuffix(name, formatSuffix); ok && valid(id) == nil {
			continue // an interrupted first mkfs; NodeStage redoes it
		} else if id, ok := strings.CutSuffix(name, growSuffix); ok && valid(id) == nil {
			continue // an interrupted offline growth; NodeStage repairs it
		}
		klog.InfoS("Unknown file in the pool; leaving it", "path", dir+"/"+name)
	}
	return s, nil
}

// load fills the index from the records and, when repair is set (this Pool
// holds the pool alone), resolves what interrupted creates and deletes left
// behind; see the table in the package doc.
func (p *Pool) load(repair bool) error {
	s, err := p.scan()
	if err != nil {
		return err
	}
	changed := false
	for id := range s.records {
		v, err := p.readRecord(id)
		if err != nil {
			// Keep it and its image: an operator can look; never guess.
			klog.ErrorS(err, "Unreadable volume record; leaving it and its image", "volumeID", id)
			continue
		}
		p.idx.put(v)
		switch {
		case !repair:
		case s.images[id] && s.tmpImages[id]:
			// Only a duplicate create that crashed before cleaning up makes
			// this, but a .tmp image might be a moved-aside volume: keep it.
			if err := p.quarantine(tmpPrefix + id + imgSuffix); err != nil {
				return err
			}
			changed = true
		case s.tmpImages[id]:
			// The record is the commit point: the create or the rollback of
			// a delete completes.
			if err := unix.Rename(p.tmpImagePath(id), p.imagePath(id)); err != nil {
				return &os.LinkError{Op: "rename", Old: p.tmpImagePath(id), New: p.imagePath(id), Err: err}
			}
			klog.InfoS("Rolled forward an interrupted create or delete", "volumeID", id, "name", v.Name)
			changed = true
		}
		if repair && (s.images[id] || s.tmpImages[id]) {
			// After the renames above the image is at <id>.img.
			rolled, err := p.rollForwardExpand(v)
			if err != nil {
				return err
			}
			changed = changed || rolled
		}
		// A pending volume without its image is a blank one not used yet
		// (or whose image a crash lost): its first use makes it.
		if !s.images[id] && !s.tmpImages[id] && !v.ImagePending {
			klog.InfoS("Volume record without image; its condition is abnormal", "volumeID", id,
				"name", v.Name, "image", p.imagePath(id))
		}
	}
	if !repair {
		return nil
	}
	for _, name := range s.tmpRecords {
		if err := removeGarbage(p.vdir + "/" + name); err != nil {
			return err
		}
		changed = true
	}
	for id := range s.tmpImages {
		if !s.records[id] {
			// A create that crashed before its commit point, or a delete
			// after it: never reported as a volume, certainly garbage.
			if err := removeGarbage(p.tmpImagePath(id)); err != nil {
				return err
			}
			changed = true
		}
	}
	for id := range s.images {
		if !s.records[id] {
			if err := p.quarantine(id + imgSuffix); err != nil {
				return err
			}
			changed = true
		}
	}
	if changed {
		return fsync(p.vfd)
	}
	return nil
}

func removeGarbage(path string) error {
	if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: path, Err: err}
	}
	klog.InfoS("Removed a temporary file of an interrupted operation", "path", path)
	return nil
}

// quarantine moves <dir>/volumes/<name> to <dir>/quarantine/ under a unique
// name, durably. Used for images that have no record: they should not
// exist, but one might hold a user's data, so filevol never deletes them.
func (p *Pool) quarantine(name string) error { return p.quarantineFrom(p.vdir, name) }

// quarantineFrom is quarantine for any pool directory (volumes/, snapshots/).
func (p *Pool) quarantineFrom(dir, name string) error {
	stem := strings.TrimPrefix(strings.TrimSuffix(name, imgSuffix), ".")
	dst := p.qdir + "/" + stem + "-" + time.Now().UTC().Format("20060102T150405.000000000Z") + imgSuffix
	if err := renameNoReplace(dir+"/"+name, dst); err != nil {
		return err
	}
	klog.InfoS("Quarantined an image without a record; it may hold data, remove it by hand once checked",
		"from", dir+"/"+name, "to", dst)
	return syncDir(p.qdir)
}
