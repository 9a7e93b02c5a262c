package csi

import (
	"fmt"
	"slices"
	"strings"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// routes send a call to what serves its volume: the controller's store or
// the node's backend of the pool and the kind that the volume ID names
// (internal/volid), as csi-driver-nfs's IDs name their server and share.
// The ID alone decides, with no record read, so one process serves
// several pools and kinds, and a volume of a pool or kind it does not
// serve is answered at once instead of being looked for in the wrong one.
type routes[T comparable] struct {
	byVolume map[route]T
	// bySnapshot: a snapshot ID names its pool, not a kind; the first
	// registration of a pool holds the pool's snapshots.
	bySnapshot map[string]T
	// all lists each registration once, in order: the first is where
	// CreateVolume puts volumes (pickStore).
	all []T
}

// route is what a volume ID names: its pool ("" for a version 0 ID) and
// its kind.
type route struct {
	pool string
	kind volid.Kind
}

// add routes the volumes of kind in the pool poolID to v. Registering a
// route twice is a programming error.
func (r *routes[T]) add(poolID string, kind volid.Kind, v T) {
	if r.byVolume == nil {
		r.byVolume, r.bySnapshot = map[route]T{}, map[string]T{}
	}
	k := route{poolID, kind}
	if _, dup := r.byVolume[k]; dup {
		panic(fmt.Sprintf("csi: volumes of kind %s in pool %s registered twice", kind, poolID))
	}
	r.byVolume[k] = v
	if _, ok := r.bySnapshot[poolID]; !ok {
		r.bySnapshot[poolID] = v
	}
	if !slices.Contains(r.all, v) {
		r.all = append(r.all, v)
	}
}

// addLegacy routes version 0 IDs ("fv-", "fs-"), which name no pool, to
// the image volumes of the pool poolID, already added: they were made
// before pools had IDs, by the node-local pool of the node that made them.
func (r *routes[T]) addLegacy(poolID string) {
	v, ok := r.byVolume[route{poolID, volid.KindImage}]
	if !ok {
		panic(fmt.Sprintf("csi: legacy IDs routed to pool %s, which serves no image volumes", poolID))
	}
	r.byVolume[route{"", volid.KindImage}] = v
	r.bySnapshot[""] = r.bySnapshot[poolID]
}

// volume returns what serves the volume id. A malformed ID is NOT_FOUND
// (checkVolumeID: no volume can have it). A well-formed one of a pool or
// kind not served here names no volume here: the error wraps
// volume.ErrNotFound (NOT_FOUND), as a volume missing from a served pool
// would, so a caller that hands such volumes on (ControllerExpandVolume
// with --defer-expansion-to-node) treats both alike.
func (r *routes[T]) volume(id string) (T, error) {
	var zero T
	if err := checkVolumeID(id); err != nil {
		return zero, err
	}
	v, _ := volid.ParseVolumeAnyKind(id) // checked just above
	if t, ok := r.byVolume[route{v.Pool, v.Kind}]; ok {
		return t, nil
	}
	where := "pool " + v.Pool
	if v.Version == 0 {
		where = "the node-local pool (a version 0 ID)"
	}
	return zero, fmt.Errorf("%w: volume %s is a %s volume of %s, which this filevol does not serve (it serves %s)",
		volume.ErrNotFound, truncate(id), v.Kind, where, r.served())
}

// snapshot returns what holds the snapshot id: a malformed ID wraps
// volid.ErrInvalid, one of a pool not served here volume.ErrSnapshotNotFound
// (both NOT_FOUND).
func (r *routes[T]) snapshot(id string) (T, error) {
	var zero T
	s, err := volid.ParseSnapshot(id)
	if err != nil {
		return zero, err
	}
	if t, ok := r.bySnapshot[s.Pool]; ok {
		return t, nil
	}
	return zero, fmt.Errorf("%w: snapshot %s is in pool %s, which this filevol does not serve (it serves %s)",
		volume.ErrSnapshotNotFound, truncate(id), s.Pool, r.served())
}

// served describes the routes for a message: "img volumes of pool 3f9a0c2e".
func (r *routes[T]) served() string {
	var out []string
	for k := range r.byVolume {
		if k.pool != "" {
			out = append(out, fmt.Sprintf("%s volumes of pool %s", k.kind, k.pool))
		}
	}
	if len(out) == 0 {
		return "no pool"
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// validSnapshotID reports whether id has the shape of a snapshot ID: what
// a listing's token must be (page.go).
func validSnapshotID(id string) error {
	_, err := volid.ParseSnapshot(id)
	return err
}

// validVolumeID reports whether id has the shape of a volume ID of any
// kind: what a listing's token must be (page.go).
func validVolumeID(id string) error {
	_, err := volid.ParseVolumeAnyKind(id)
	return err
}

// routed routes id (route: a routes' volume or snapshot) and reads its
// record (get) from what serves it: that, and the record.
func routed[T, R any](id string, route func(string) (T, error), get func(T, string) (R, error)) (T, R, error) {
	t, err := route(id)
	if err != nil {
		var none R
		return t, none, err
	}
	rec, err := get(t, id)
	return t, rec, err
}
