package csi

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/freeze"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// VolumeStore is what the controller service asks of a pool: its records
// and the operations on a volume's data, never a path or a device. It is
// the controller's half of a kind of volume in a pool, as NodeBackend is
// the node's. *pool.Pool implements it for image volumes on a node's
// pool; another kind of pool (a shared image pool, a directory pool with
// quotas) implements it too and is served beside it (serve, below): the
// services route each call by the pool and kind of its volume ID
// (routes.go) and do not change.
type VolumeStore interface {
	// Dir is where the pool lives; the in-use records and the freeze
	// requests that controller and nodes exchange live under it.
	Dir() string
	// VolumeID and SnapshotID are the IDs the pool gives names: they
	// name the pool and the kind of volume (internal/volid).
	VolumeID(name string) string
	SnapshotID(name string) string
	Known(id string) bool
	// KnownNode reports whether node has opened the pool (a node of a
	// shared pool says so there when it starts): ControllerPublishVolume
	// attaches only to such nodes.
	KnownNode(node string) bool
	// Traits says what the kind can do (the same as its NodeBackend's).
	Traits() volume.Traits
	Get(id string) (volume.Volume, error)
	GetByName(name string) (volume.Volume, error)
	Create(ctx context.Context, req volume.CreateRequest) (volume.Volume, error)
	Delete(ctx context.Context, id string) error
	List() []volume.Volume
	Expand(ctx context.Context, id string, size, requested int64) (volume.Volume, error)
	Capacity() (volume.Capacity, error)
	// Modify changes the volume's I/O limits and provisioning, all or
	// nothing (ControllerModifyVolume); the nodes read the limits from
	// the record and enforce them.
	Modify(ctx context.Context, id string, m volume.Modification) (volume.Volume, error)
	// ImageLost: the volume's data is gone (not merely not made yet).
	ImageLost(id string) bool

	CreateSnapshot(ctx context.Context, req volume.SnapshotRequest) (volume.Snapshot, error)
	GetSnapshot(id string) (volume.Snapshot, error)
	GetSnapshotByName(name string) (volume.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	ListSnapshots() []volume.Snapshot
}

// poolStore is one route of the controller: the store of a pool's volumes
// of one kind, and what the controller and the nodes exchange through
// that pool: the nodes' in-use records and the freeze requests.
type poolStore struct {
	VolumeStore
	inuse   *inuse.Store
	freezer *freeze.Requester
	// attach holds the pool's attachments (ControllerPublishVolume); only
	// a shared pool has any.
	attach *attach.Store
}

// serve routes the volumes of kind in the pool poolID to st. Stores in one
// pool directory share its in-use records and its freeze requests.
func (s *ControllerService) serve(poolID string, kind volid.Kind, st VolumeStore) {
	ps := &poolStore{VolumeStore: st}
	for _, o := range s.stores.all {
		if o.Dir() == st.Dir() {
			ps.inuse, ps.freezer, ps.attach = o.inuse, o.freezer, o.attach
		}
	}
	if ps.inuse == nil {
		ps.inuse, ps.freezer, ps.attach = inuse.New(st.Dir()), freeze.NewRequester(st.Dir()), attach.New(st.Dir())
	}
	s.stores.add(poolID, kind, ps)
}

// createStore is where CreateVolume makes a new volume: the StorageClass's
// provisioningMode chooses the kind (its Traits.ProvisioningMode; none:
// an image in this node's pool), here and nowhere else, and the chosen
// store checks the parameters of a kind of its own (parameterChecker).
func (s *ControllerService) createStore(p createParams, params map[string]string) (*poolStore, error) {
	var modes []string
	for _, st := range s.stores.all {
		mode := st.Traits().ProvisioningMode
		if mode != p.mode {
			if mode != "" {
				modes = append(modes, mode)
			}
			continue
		}
		if c, ok := st.VolumeStore.(parameterChecker); ok {
			if err := c.CheckParameters(params); err != nil {
				return nil, err
			}
		}
		return st, nil
	}
	switch {
	case len(s.stores.all) == 0:
		return nil, failedPrecondition("this controller serves no pool")
	case p.mode == volume.ProvisioningModeDirectory:
		return nil, failedPrecondition("%s=%s: this filevol serves no directory pool (start it with --dir-pool-dir)", volume.ParamProvisioningMode, p.mode)
	case p.mode == "":
		return nil, failedPrecondition("this filevol serves no image volumes: set %s (it serves %s)", volume.ParamProvisioningMode, strings.Join(modes, ", "))
	}
	return nil, invalidArgument("parameter %s=%q: filevol makes %q volumes (a directory volume); leave it out for an image volume",
		volume.ParamProvisioningMode, p.mode, volume.ProvisioningModeDirectory)
}

// parameterChecker is a store of a kind with StorageClass parameters of
// its own, which it checks before anything is made.
type parameterChecker interface {
	CheckParameters(params map[string]string) error
}

// freezers lists each pool's freeze requester once.
func (s *ControllerService) freezers() []*freeze.Requester {
	var out []*freeze.Requester
	for _, st := range s.stores.all {
		if !slices.Contains(out, st.freezer) {
			out = append(out, st.freezer)
		}
	}
	return out
}

// listVolumes merges the stores' volumes in ID order (the order listings
// page in); a volume two stores of one pool both list appears once.
func (s *ControllerService) listVolumes() []volume.Volume {
	return merged(s.stores.all, VolumeStore.List, func(v volume.Volume) string { return v.ID })
}

// listSnapshots merges the stores' snapshots in ID order.
func (s *ControllerService) listSnapshots() []volume.Snapshot {
	return merged(s.stores.all, VolumeStore.ListSnapshots, func(sn volume.Snapshot) string { return sn.ID })
}

func merged[T any](stores []*poolStore, list func(VolumeStore) []T, id func(T) string) []T {
	if len(stores) == 1 {
		return list(stores[0].VolumeStore)
	}
	var out []T
	for _, st := range stores {
		out = append(out, list(st.VolumeStore)...)
	}
	slices.SortStableFunc(out, func(a, b T) int { return strings.Compare(id(a), id(b)) })
	return slices.CompactFunc(out, func(a, b T) bool { return id(a) == id(b) })
}

// snapshotByName finds the snapshot called name in any store.
func (s *ControllerService) snapshotByName(name string) (volume.Snapshot, error) {
	err := error(volume.ErrSnapshotNotFound)
	for _, st := range s.stores.all {
		var snap volume.Snapshot
		if snap, err = st.GetSnapshotByName(name); err == nil {
			return snap, nil
		}
	}
	return volume.Snapshot{}, err
}

// allInUse merges the in-use records of every pool served.
func (s *ControllerService) allInUse() (map[string][]inuse.Entry, error) {
	out := map[string][]inuse.Entry{}
	var seen []*inuse.Store
	for _, st := range s.stores.all {
		if slices.Contains(seen, st.inuse) {
			continue
		}
		seen = append(seen, st.inuse)
		recs, err := st.inuse.All()
		if err != nil {
			return nil, err
		}
		maps.Copy(out, recs)
	}
	return out, nil
}

// storedVolume routes id to its store and reads the volume's record.
func (s *ControllerService) storedVolume(id string) (*poolStore, volume.Volume, error) {
	return routed(id, s.stores.volume, (*poolStore).Get)
}

// storedSnapshot routes id to the store of its pool and reads the
// snapshot's record.
func (s *ControllerService) storedSnapshot(id string) (*poolStore, volume.Snapshot, error) {
	return routed(id, s.stores.snapshot, (*poolStore).GetSnapshot)
}
