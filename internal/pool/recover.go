package pool

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/recordstore"
)

// images is what the names of one store's directory that the store does
// not own say of the images there, by ID.
type images struct {
	present, tmp map[string]bool
}

// has reports whether id has an image, published or not.
func (im images) has(id string) bool { return im.present[id] || im.tmp[id] }

// classifyImages sorts the names a store left to the pool (Scan.Others):
// images and temporary images of IDs valid accepts, and node markers,
// left alone. Names that are not ours are logged and left alone too: the
// directory is the operator's as well.
func (p *Pool) classifyImages(dir string, names []string, valid func(string) error) images {
	im := images{present: map[string]bool{}, tmp: map[string]bool{}}
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, tmpPrefix); ok {
			if id, ok := strings.CutSuffix(rest, imgSuffix); ok && valid(id) == nil {
				im.tmp[id] = true
				continue
			}
		} else if id, ok := strings.CutSuffix(name, imgSuffix); ok && valid(id) == nil {
			im.present[id] = true
			continue
		} else if p.node.VolumeMarker(name) {
			continue // an interrupted mkfs or offline growth; NodeStage repairs it
		}
		klog.InfoS("Unknown file in the pool; leaving it", "path", dir+"/"+name)
	}
	return im
}

// scanVolumes reads volumes/ without changing it.
func (p *Pool) scanVolumes() (recordstore.Scan[Volume], images, error) {
	sc, err := p.vols.Scan()
	if err != nil {
		return sc, images{}, err
	}
	return sc, p.classifyImages(p.vdir, sc.Others, validID), nil
}

// load fills the volume index from the records and, when repair is set
// (this Pool holds the pool alone), resolves what interrupted creates,
// deletes and expansions left behind; see the table in the package doc.
func (p *Pool) load(repair bool) error {
	return loadStore(p, p.vols, "volume", validID, repair, func(v Volume, hasImage bool) error {
		if repair && hasImage {
			// After loadStore's renames the image is at <id>.img.
			if err := p.rollForwardExpand(v); err != nil {
				return err
			}
		}
		// A pending volume without its image is a blank one not used yet
		// (or whose image a crash lost): its first use makes it.
		if !hasImage && !v.ImagePending {
			klog.InfoS("Volume record without image; its condition is abnormal", "volumeID", v.ID,
				"name", v.Name, "image", p.imagePath(v.ID))
		}
		return nil
	})
}

// loadSnapshots is load for snapshots/: the same states, the same answers.
func (p *Pool) loadSnapshots(repair bool) error {
	return loadStore(p, p.snaps, "snapshot", validSnapshotID, repair, func(s Snapshot, hasImage bool) error {
		if !hasImage {
			klog.InfoS("Snapshot record without image: restores from it will fail", "snapshotID", s.ID, "name", s.Name)
		}
		return nil
	})
}

// loadStore loads one store (which removes its own unpublished records
// when repairing) and resolves the states of its images that the table in
// the package doc lists, the same for volumes and snapshots. check sees
// every readable record once its image is in place, and whether it has one.
func loadStore[T record](p *Pool, st *recordstore.Store[T], kind string, valid func(string) error,
	repair bool, check func(rec T, hasImage bool) error) error {
	sc, err := st.Load(repair)
	if err != nil {
		return err
	}
	dir := st.Dir()
	im := p.classifyImages(dir, sc.Others, valid)
	changed := false
	for _, rec := range sc.Loaded {
		id := rec.RecordID()
		switch {
		case !repair:
		case im.present[id] && im.tmp[id]:
			// Only a duplicate create that crashed before cleaning up makes
			// this, but a .tmp image might be a moved-aside one: keep it.
			if err := p.quarantineFrom(dir, tmpPrefix+id+imgSuffix); err != nil {
				return err
			}
			changed = true
		case im.tmp[id]:
			// The record is the commit point: the create or the rollback of
			// a delete completes.
			tmp, img := tmpImagePath(dir, id), imagePath(dir, id)
			if err := unix.Rename(tmp, img); err != nil {
				return &os.LinkError{Op: "rename", Old: tmp, New: img, Err: err}
			}
			klog.InfoS("Rolled forward an interrupted "+kind+" create or delete", kind+"ID", id, "name", rec.recordName())
			changed = true
		}
		if err := check(rec, im.has(id)); err != nil {
			return err
		}
	}
	if !repair {
		return nil
	}
	for id := range im.tmp {
		if !sc.Records[id] {
			// A create that crashed before its commit point, or a delete
			// after it: never reported to anyone, certainly garbage.
			if err := recordstore.RemoveGarbage(tmpImagePath(dir, id)); err != nil {
				return err
			}
			changed = true
		}
	}
	for id := range im.present {
		if !sc.Records[id] {
			if err := p.quarantineFrom(dir, id+imgSuffix); err != nil {
				return err
			}
			changed = true
		}
	}
	if changed {
		return st.SyncNow()
	}
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
	if err := durable.RenameNoReplace(dir+"/"+name, dst); err != nil {
		return err
	}
	klog.InfoS("Quarantined an image without a record; it may hold data, remove it by hand once checked",
		"from", dir+"/"+name, "to", dst)
	return durable.SyncDir(p.qdir)
}
