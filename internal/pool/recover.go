package pool

import (
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volume"
)

// images is what the names of one store's directory that the store does
// not own say of the images there, by ID.
type images struct {
	present map[string]bool
	// own are the temporary images that this Pool's repair resolves, by
	// ID: on a node-local pool every one, on a shared pool those its
	// owner's tag names.
	own map[string][]string
	// others are the temporary images of other owners of a shared pool
	// (and untagged ones, whose owner nobody knows): their operations, in
	// flight or theirs to repair. Never touched, only counted as images.
	others map[string][]string
}

// has reports whether id has an image, published or not.
func (im images) has(id string) bool {
	return im.present[id] || len(im.own[id]) > 0 || len(im.others[id]) > 0
}

// classifyImages sorts the names a store left to the pool (Scan.Others):
// images and temporary images of IDs valid accepts, and node markers,
// left alone. Names that are not ours are logged and left alone too: the
// directory is the operator's as well.
func (p *Pool) classifyImages(dir string, names []string, valid func(string) error) images {
	im := images{present: map[string]bool{}, own: map[string][]string{}, others: map[string][]string{}}
	for _, name := range names {
		switch id, tmp, ok := ImageFileID(name, valid); {
		case ok && !tmp:
			im.present[id] = true
		case ok && p.ownTmp(name):
			im.own[id] = append(im.own[id], name)
		case ok:
			im.others[id] = append(im.others[id], name)
		case p.node.VolumeMarker(name):
			// an interrupted mkfs or offline growth; NodeStage repairs it
		default:
			klog.InfoS("Unknown file in the pool; leaving it", "path", dir+"/"+name)
		}
	}
	for _, l := range im.own {
		slices.Sort(l)
	}
	return im
}

// ownTmp reports whether the temporary image name is this Pool's to
// repair: on a node-local pool, whose repair holds the pool alone, every
// one is; on a shared pool only its owner's (lock.go), whatever locks
// say of the others.
func (p *Pool) ownTmp(name string) bool {
	return !p.opts.Shared || tmpOwner(name) == p.key()
}

// scanVolumes reads volumes/ without changing it.
func (p *Pool) scanVolumes() (recordstore.Scan[volume.Volume], images, error) {
	sc, err := p.vols.Scan()
	if err != nil {
		return sc, images{}, err
	}
	return sc, p.classifyImages(p.vdir, sc.Others, validID), nil
}

// load fills the volume index from the records and, when repair is set
// (no other process that may own them has the pool open), resolves what
// interrupted creates, deletes and expansions left behind; see the table
// in the package doc. On a shared pool, only this owner's leftovers.
func (p *Pool) load(repair bool) error {
	return loadStore(p, p.vols, "volume", validID, repair, func(v volume.Volume, hasImage bool) error {
		// An image larger than its record is an expansion cut short. On a
		// shared pool it may be another host's expansion in flight, whose
		// record it would overwrite: the retried expansion records the
		// size there (Expand takes an image larger than its record as
		// grown).
		if repair && hasImage && !p.opts.Shared {
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
	return loadStore(p, p.snaps, "snapshot", validSnapshotID, repair, func(s volume.Snapshot, hasImage bool) error {
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
//
// Only this Pool's temporary images are resolved (images.own): on a
// shared pool another owner's is an operation in flight on another host,
// or that owner's to repair when it opens the pool again. Nor does a
// shared pool's open quarantine an image without a record: another host
// may not see a record this one does not see yet either way; the garbage
// collector does it, once the image is old enough (orphans.go).
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
		own := im.own[id]
		switch {
		case !repair || len(own) == 0:
		case im.present[id] || len(im.others[id]) > 0:
			// Only a duplicate create that crashed before cleaning up makes
			// the first, and another owner works on the image in the second;
			// either way a .tmp image might be a moved-aside one: keep it.
			// Unless it is the image itself under a second name: a rename
			// by link and unlink (durable.RenameNoReplace, where the
			// filesystem has no RENAME_NOREPLACE, as GlusterFS's FUSE
			// client) cut between the two. Kept, it would hold the live
			// image, and once the volume is deleted its data, for ever.
			for _, name := range own {
				if im.present[id] && sameFile(dir+"/"+name, imagePath(dir, id)) {
					if err := recordstore.RemoveGarbage(dir + "/" + name); err != nil {
						return err
					}
					continue
				}
				if err := p.quarantineFrom(dir, name); err != nil {
					return err
				}
			}
			changed = true
		default:
			// The record is the commit point: the create or the rollback of
			// a delete completes. (An operation makes one temporary image;
			// only a pool with a mixed past, node-local and shared, can
			// hold two of one ID: the rest go to quarantine.)
			tmp, img := dir+"/"+own[0], imagePath(dir, id)
			if err := unix.Rename(tmp, img); err != nil {
				return &os.LinkError{Op: "rename", Old: tmp, New: img, Err: err}
			}
			klog.InfoS("Rolled forward an interrupted "+kind+" create or delete", kind+"ID", id, "name", rec.RecordName())
			for _, name := range own[1:] {
				if err := p.quarantineFrom(dir, name); err != nil {
					return err
				}
			}
			changed = true
		}
		if err := check(rec, im.has(id)); err != nil {
			return err
		}
	}
	if !repair {
		return nil
	}
	for id, names := range im.own {
		if sc.Records[id] {
			continue
		}
		// A create that crashed before its commit point, or a delete
		// after it: never reported to anyone, certainly garbage.
		for _, name := range names {
			if err := recordstore.RemoveGarbage(dir + "/" + name); err != nil {
				return err
			}
		}
		changed = true
	}
	for id := range im.present {
		if !sc.Records[id] && !p.opts.Shared {
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

// sameFile reports whether paths a and b name one file (a hard link).
func sameFile(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Lstat(a, &sa) == nil && unix.Lstat(b, &sb) == nil && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
