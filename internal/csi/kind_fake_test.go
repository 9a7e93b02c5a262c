package csi

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// A second kind of volume, for tests of the routing only: a controller
// half (fakeStore, a VolumeStore) and a node half (fakeNode, a
// NodeBackend) that keep their volumes in memory and log every call.
// They stand for the kinds to come (a directory with a quota, an image in
// a shared pool); the image kind keeps its real tests.

const (
	fakeKind volid.Kind = "tst"
	fakePool            = "0000fa4e"
)

// fakeLog is a log of calls, safe for concurrent use.
type fakeLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *fakeLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, args...))
}

// took reports whether a call starting with prefix was logged.
func (l *fakeLog) took(prefix string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// addSecrets logs each secret a call received, as "secret <call> k=v":
// what reached the backend, for the tests of their way there.
func (l *fakeLog) addSecrets(call string, s volume.Secrets) {
	for _, k := range slices.Sorted(maps.Keys(s)) {
		l.add("secret %s %s=%s", call, k, s[k])
	}
}

func (l *fakeLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, "; ")
}

// fakeNode is the node half of the fake kind. Staged volumes are a set;
// a publish makes its target directory, so that stats find it.
type fakeNode struct {
	fakeLog
	dir    string
	vols   map[string]volume.Volume
	staged map[string]bool
	// stageErr, when set, fails Stage; leftover says whether the failed
	// stage left something of the volume on the node.
	stageErr error
	leftover bool
}

var _ NodeBackend = (*fakeNode)(nil)

func newFakeNode(t *testing.T) *fakeNode {
	return &fakeNode{dir: t.TempDir(), vols: map[string]volume.Volume{}, staged: map[string]bool{}}
}

// volume makes a volume of the fake kind and returns its ID.
func (f *fakeNode) volume(name string) string {
	id := volid.NewVolume(fakeKind, fakePool, name)
	f.vols[id] = volume.Volume{ID: id, Name: name, CapacityBytes: 1 << 30}
	return id
}

func (f *fakeNode) Dir() string { return f.dir }

func (f *fakeNode) Get(id string) (volume.Volume, error) {
	v, ok := f.vols[id]
	if !ok {
		return v, volume.ErrNotFound
	}
	return v, nil
}

func (f *fakeNode) InUse(id string) (bool, error) { return f.staged[id], nil }

func (f *fakeNode) Stage(_ context.Context, vol volume.Volume, r volume.StageRequest) (string, error) {
	f.add("stage %s %+v", vol.ID, r)
	f.addSecrets("stage", r.Secrets)
	if f.stageErr != nil {
		f.staged[vol.ID] = f.leftover
		return "", f.stageErr
	}
	f.staged[vol.ID] = true
	return "fake:" + vol.ID, nil
}

func (f *fakeNode) Unstage(_ context.Context, id, staging string) error {
	f.add("unstage %s %s", id, staging)
	delete(f.staged, id)
	return nil
}

func (f *fakeNode) Publish(_ context.Context, vol volume.Volume, r volume.PublishRequest) error {
	f.add("publish %s %+v", vol.ID, r)
	f.addSecrets("publish", r.Secrets)
	return os.MkdirAll(r.TargetPath, 0o750)
}

func (f *fakeNode) Unpublish(_ context.Context, id, target string) error {
	f.add("unpublish %s %s", id, target)
	return os.Remove(target)
}

func (f *fakeNode) Stats(_ context.Context, vol volume.Volume, path string) ([]*csipb.VolumeUsage, error) {
	f.add("stats %s %s", vol.ID, path)
	return []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: vol.CapacityBytes}}, nil
}

func (f *fakeNode) Expand(_ context.Context, vol volume.Volume, r volume.ExpandRequest) (int64, error) {
	f.add("expand %s %+v", vol.ID, r)
	f.addSecrets("expand", r.Secrets)
	return r.RequiredBytes, nil
}

func (f *fakeNode) Health(_ context.Context, vol volume.Volume, publishPath, stagingPath string) ([]*csipb.VolumeHealth_VolumeHealthEntry, error) {
	f.add("health %s %s %s", vol.ID, publishPath, stagingPath)
	return []*csipb.VolumeHealth_VolumeHealthEntry{answer.HealthEntry(csipb.VolumeHealthErrorType_DEGRADED, "Fake", "said the fake")}, nil
}

// fakeStore is the controller half of the fake kind.
type fakeStore struct {
	fakeLog
	dir   string
	vols  map[string]volume.Volume
	snaps map[string]volume.Snapshot
	// traits are what the fake kind says it can do; none: an image's.
	traits volume.Traits
	// check is how it checks StorageClass parameters of its own (none:
	// it has none).
	check func(params map[string]string) error
}

// KnownNode: the nodes that announced themselves in its directory, as a
// pool's.
func (f *fakeStore) KnownNode(node string) bool { return poolowner.Known(f.dir, node) }

// CheckParameters makes the fake a parameterChecker.
func (f *fakeStore) CheckParameters(params map[string]string) error {
	if f.check == nil {
		return nil
	}
	return f.check(params)
}

var _ VolumeStore = (*fakeStore)(nil)

func newFakeStore(t *testing.T) *fakeStore {
	return &fakeStore{dir: t.TempDir(), vols: map[string]volume.Volume{}, snaps: map[string]volume.Snapshot{}}
}

func (f *fakeStore) Dir() string                   { return f.dir }
func (f *fakeStore) VolumeID(name string) string   { return volid.NewVolume(fakeKind, fakePool, name) }
func (f *fakeStore) SnapshotID(name string) string { return volid.NewSnapshot(fakePool, name) }
func (f *fakeStore) Known(id string) bool          { _, ok := f.vols[id]; return ok }

func (f *fakeStore) Get(id string) (volume.Volume, error) {
	f.add("get %s", id)
	v, ok := f.vols[id]
	if !ok {
		return v, volume.ErrNotFound
	}
	return v, nil
}

func (f *fakeStore) GetByName(name string) (volume.Volume, error) { return f.Get(f.VolumeID(name)) }

func (f *fakeStore) Create(_ context.Context, req volume.CreateRequest) (volume.Volume, error) {
	f.add("create %s", req.Name)
	f.addSecrets("create", req.Secrets)
	v := volume.Volume{ID: f.VolumeID(req.Name), Name: req.Name, CapacityBytes: req.CapacityBytes, FSType: req.FSType,
		Provisioning: req.Provisioning, Parameters: req.Parameters}
	f.vols[v.ID] = v
	return v, nil
}

func (f *fakeStore) Delete(_ context.Context, id string) error {
	f.add("delete %s", id)
	delete(f.vols, id)
	return nil
}

func (f *fakeStore) List() []volume.Volume {
	out := slices.Collect(maps.Values(f.vols))
	slices.SortFunc(out, func(a, b volume.Volume) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (f *fakeStore) Expand(_ context.Context, id string, size, requested int64) (volume.Volume, error) {
	f.add("expand %s %d", id, size)
	v, err := f.Get(id)
	if err != nil {
		return v, err
	}
	v.CapacityBytes = max(v.CapacityBytes, size)
	f.vols[id] = v
	return v, nil
}

func (f *fakeStore) Capacity() (volume.Capacity, error) {
	return volume.Capacity{TotalBytes: 1 << 40, FreeBytes: 1 << 40, AvailableBytes: 1 << 40}, nil
}

func (f *fakeStore) ImageLost(id string) bool { return false }

func (f *fakeStore) CreateSnapshot(_ context.Context, req volume.SnapshotRequest) (volume.Snapshot, error) {
	f.add("snapshot %s of %s", req.Name, req.SourceVolumeID)
	f.addSecrets("snapshot", req.Secrets)
	s := volume.Snapshot{ID: f.SnapshotID(req.Name), Name: req.Name, SourceVolumeID: req.SourceVolumeID, SizeBytes: f.vols[req.SourceVolumeID].CapacityBytes}
	f.snaps[s.ID] = s
	return s, nil
}

func (f *fakeStore) GetSnapshot(id string) (volume.Snapshot, error) {
	f.add("get snapshot %s", id)
	s, ok := f.snaps[id]
	if !ok {
		return s, volume.ErrSnapshotNotFound
	}
	return s, nil
}

func (f *fakeStore) GetSnapshotByName(name string) (volume.Snapshot, error) {
	s, ok := f.snaps[f.SnapshotID(name)]
	if !ok {
		return s, volume.ErrSnapshotNotFound
	}
	return s, nil
}

func (f *fakeStore) DeleteSnapshot(_ context.Context, id string) error {
	f.add("delete snapshot %s", id)
	delete(f.snaps, id)
	return nil
}

func (f *fakeStore) ListSnapshots() []volume.Snapshot {
	out := slices.Collect(maps.Values(f.snaps))
	slices.SortFunc(out, func(a, b volume.Snapshot) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (f *fakeStore) Modify(_ context.Context, id string, m volume.Modification) (volume.Volume, error) {
	f.add("modify %s", id)
	v, err := f.Get(id)
	if err != nil {
		return v, err
	}
	if m.Provisioning != "" {
		v.Provisioning = m.Provisioning
	}
	if q := m.QoS; !q.IsZero() {
		v.QoS = &q
	} else {
		v.QoS = nil
	}
	f.vols[id] = v
	return v, nil
}

// The fake kind can do what image volumes can (pool.Traits).
func (f *fakeNode) Traits() volume.Traits { return pool.Traits }
func (f *fakeStore) Traits() volume.Traits {
	if f.traits.Noun != "" {
		return f.traits
	}
	return pool.Traits
}
