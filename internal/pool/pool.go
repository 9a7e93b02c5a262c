// Package pool owns the storage pool: a directory holding one sparse image
// file and one small JSON record per volume (and per snapshot). The pool
// directory is the source of truth; the records are kept by
// internal/recordstore (one store for volumes, one for snapshots), whose
// in-memory index is only a cache of them. What the pool adds is the
// images: made, cloned, grown, published and repaired around the records'
// commit points.
//
// Layout (all in one directory so one directory fsync covers a whole create):
//
//	<dir>/volumes/<id>.img        the volume's image file
//	<dir>/volumes/<id>.json       its record (the commit point of a create)
//	<dir>/volumes/.tmp-*          files of an operation in progress
//	<dir>/snapshots/<sid>.img     a snapshot: an independent copy of an image
//	<dir>/snapshots/<sid>.json    its record (same commit rules as volumes)
//	<dir>/groups/<gid>.json       a group snapshot: the commit point that makes
//	                              its member snapshots visible (group.go)
//	<dir>/volumes/<id>.formatting node markers (internal/nodestate); the pool
//	<dir>/volumes/<id>.growing    only removes them with their volume
//	<dir>/frozen/<id>             a filesystem frozen for a clone (nodestate)
//	<dir>/quarantine/             images found without a record (never deleted)
//	<dir>/.lock                   flock held by every open Pool (see below)
//	<dir>/pool.json               the pool's identity (identity.go)
//	<dir>/owners/<key>/           a shared pool's owners (internal/poolowner, lock.go)
//
// Create writes the image as .tmp-<id>.img, then the record (renamed into
// place: the commit point), then renames the image to <id>.img and fsyncs the
// directory once. A thin, blank volume gets no image from its create: its
// record marks it pending, and the image is made at its first use
// (pending.go). Delete renames the image back to .tmp-<id>.img, removes the
// record (the commit point), fsyncs the directory and unlinks the image.
// Operations that wait for a directory fsync at the same time share one,
// which must have started after their last change (durable.DirSync). So a
// crash at any instant leaves one of these states, which Open resolves:
//
//	record + .tmp-<id>.img, no <id>.img   roll forward: rename the image into place
//	.tmp-<id>.img, no record              before a create's commit or after a
//	                                      delete's: garbage, removed
//	.tmp-*.json.*                         an unpublished record: garbage, removed
//	<id>.img, no record                   unexpected; may be data: quarantined
//	record marked ImagePending, image     left: a blank volume not used yet; made,
//	missing or short                      or grown, at first use (pending.go)
//	record, no image at all               kept and logged; ImageExists is false
//
// The records' rows of the table (unpublished records) are the record
// store's to resolve, the images' the pool's (recover.go). Snapshots live
// in <dir>/snapshots under exactly the same rules: create, delete and the
// table above apply there unchanged, by the same code (recover.go,
// delete.go). An expansion grows the image before it rewrites the record,
// so the one state it can leave is an image larger than its record, which
// Open rolls forward by recording the image's size (expand.go): never
// shrinking a file whose new space a filesystem may already use.
//
// Open only repairs when it holds the pool lock alone (<dir>/.lock, flock):
// a second process opening a pool in use must not take the first one's
// in-flight temporary files for garbage.
//
// A pool that several hosts share (Options.Shared) is never held alone,
// and no flock of this host sees the others. There every temporary file
// carries its owner's key (.tmp-<id>@<key>.img, .tmp-<id>@<key>.json.*:
// a node, or a controller), and the table above is applied by each owner
// to its own files, when no other process of that owner has the pool
// open (lock.go); the node's freeze marks are its own (nodestate), and
// an image without a record is quarantined only by the garbage collector,
// once it is too old to be a create another host is making (orphans.go).
//
// The package knows nothing of gRPC or CSI and must not import them, nor any
// hostos package. It imports recordstore and durable, for its records and
// files, and nodestate only to remove a deleted volume's markers and to
// hand the node its markers (NodeState).
package pool

import (
	"context"
	"maps"

	"github.com/filevol/filevol/internal/nodestate"
	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// Pool is an open storage pool. Its methods are safe for concurrent use;
// callers serialise operations on one volume (per-volume locks in csi).
type Pool struct {
	dir  string // the pool directory, as given to Open
	vdir string // <dir>/volumes
	sdir string // <dir>/snapshots
	qdir string // <dir>/quarantine
	gdir string // <dir>/groups: group snapshot records (group.go)
	opts Options
	// vols and snaps keep the records of <dir>/volumes and <dir>/snapshots;
	// each holds its directory open and shares its fsyncs (recordstore),
	// with the images beside the records too.
	vols  *recordstore.Store[volume.Volume]
	snaps *recordstore.Store[volume.Snapshot]
	// groups keeps the group snapshot records of <dir>/groups.
	groups *recordstore.Store[volume.GroupSnapshot]
	// node is the node-side markers kept in the pool directory.
	node *nodestate.State
	// lockFD holds the shared flock on <dir>/.lock for the pool's lifetime.
	lockFD int
	// ownerFD holds the owner lock of a shared pool (lock.go); -1 on a
	// node-local pool.
	ownerFD int
	// tag follows the ID in the names of this Pool's temporary files:
	// "@<owner key>" on a shared pool, "" on a node-local one (lock.go).
	tag string
	// ident is the pool's identity (identity.go).
	ident identity
}

// Open creates the pool layout if missing (mode 0700), rolls forward or
// cleans up interrupted operations and loads the record index.
func Open(dir string, opts Options) (*Pool, error) { return open(dir, opts) }

// Close releases the pool lock and the directory handle. It must not run
// concurrently with other methods; the Pool is unusable afterwards.
func (p *Pool) Close() error { return p.close() }

// Dir returns the pool directory.
func (p *Pool) Dir() string { return p.dir }

// VolumeID returns the ID that a volume named name has.
//
// It is the version 1 ID (internal/volid) that names this pool, unless a
// volume of that name was made before pools had IDs: then its version 0
// ID, so that a create retried across an upgrade finds that volume.
func (p *Pool) VolumeID(name string) string {
	if legacy := volid.LegacyVolume(name); p.vols.Has(legacy) {
		return legacy
	}
	return volid.NewVolume(volid.KindImage, p.ident.ID, name)
}

// ID is the pool's ID, which its volume and snapshot IDs carry.
func (p *Pool) ID() string { return p.ident.ID }

// ValidID reports whether id has the shape of a volume ID (so it can
// become a path). It returns an error wrapping ErrInvalidID that says why.
func ValidID(id string) error { return validID(id) }

// ValidName reports whether name is acceptable as a volume name: not empty,
// at most MaxNameLen bytes, valid UTF-8, no NUL. It returns an error
// wrapping ErrInvalidArgument that says why. Create checks it too.
func ValidName(name string) error { return validName(name) }

// ImagePath returns the path of the volume's image file. id must be valid.
func (p *Pool) ImagePath(id string) string { return p.imagePath(id) }

// Create creates the image file (sparse, or fallocated for thick) and then
// the record, durably: when it returns nil the volume survives a crash. If a
// record for the name exists already, it returns ErrAlreadyExists: callers
// look the name up with GetByName first. ErrNoSpace when the pool cannot
// hold it (a single volume larger than AvailableBytes is refused up front;
// thin volumes may together overcommit the pool). Nothing is left behind on
// error. ctx is honoured until the commit point.
func (p *Pool) Create(ctx context.Context, req volume.CreateRequest) (volume.Volume, error) {
	return p.create(ctx, req)
}

// Get reads the volume's record from disk (the truth: another process may
// share the pool) and refreshes the index with it. ErrNotFound when there
// is no record, ErrInvalidID when id is not an ID.
func (p *Pool) Get(id string) (volume.Volume, error) { return p.get(id) }

// Known reports whether the index holds the volume id, without touching
// the disk. The index can lag behind another process sharing the pool;
// Create's exclusive commit (ErrAlreadyExists) is what settles a race.
func (p *Pool) Known(id string) bool { return p.vols.Has(id) }

// GetByName returns the volume created with that name, or ErrNotFound.
func (p *Pool) GetByName(name string) (volume.Volume, error) { return p.get(p.VolumeID(name)) }

// Delete removes the volume's image and record. An unknown ID is not an
// error (CSI spec: DeleteVolume of a missing volume MUST succeed).
func (p *Pool) Delete(ctx context.Context, id string) error { return p.delete(ctx, id) }

// List returns every volume known to the index (loaded by Open, kept up to
// date by Create, Delete and Get), sorted by ID (stable order for
// pagination). It does not touch the disk.
func (p *Pool) List() []volume.Volume {
	p.refresh(p.vols.Refresh)
	vols := p.vols.List()
	for i := range vols {
		// The caller owns the result: changing it cannot race with, or
		// corrupt, the index.
		vols[i].Parameters = maps.Clone(vols[i].Parameters)
	}
	return vols
}

// Capacity reports what the pool can still hold.
func (p *Pool) Capacity() (volume.Capacity, error) { return p.capacity() }

// ImageExists reports whether the volume's image file is present; false
// for an invalid ID. A blank volume not used yet has none (pending.go):
// ImageLost is the question health asks.
func (p *Pool) ImageExists(id string) bool { return p.imageExists(id) }

// ImageLost reports whether the volume's data is gone: no image file, and
// the record does not say it is blank and made at first use.
func (p *Pool) ImageLost(id string) bool { return p.imageLost(id) }

// NodeState is the node-side markers kept in the pool directory (format,
// grow, freeze: internal/nodestate); on a shared pool, this node's (its
// freeze marks are in its owner directory). Their files are nodestate's;
// the pool only removes a deleted volume's.
func (p *Pool) NodeState() *nodestate.State { return p.node }
