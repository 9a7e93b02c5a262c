package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// snapPrefix marks snapshot IDs; volume IDs start with idPrefix, so the two
// can never be confused (nor collide for one name).
const snapPrefix = "fs-"

func snapshotID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return snapPrefix + hex.EncodeToString(sum[:idHexLen/2])
}

// validSnapshotID accepts exactly what snapshotID makes, reusing the volume
// ID check on the same shape ("fv-" swapped in) so both refuse the same
// things ("..", "/", NUL, wrong length) before a path is built.
func validSnapshotID(id string) error {
	rest, ok := strings.CutPrefix(id, snapPrefix)
	if !ok {
		return fmt.Errorf("%w: snapshot ID %s does not start with %q", ErrInvalidID, quoteShort(id), snapPrefix)
	}
	if err := validID(idPrefix + rest); err != nil {
		return fmt.Errorf("snapshot ID %s: %w", quoteShort(id), err)
	}
	return nil
}

func (p *Pool) snapImagePath(id string) string    { return p.sdir + "/" + id + imgSuffix }
func (p *Pool) snapTmpImagePath(id string) string { return p.sdir + "/" + tmpPrefix + id + imgSuffix }
func (p *Pool) snapRecordPath(id string) string   { return p.sdir + "/" + id + recSuffix }

func encodeSnapshot(s *Snapshot) ([]byte, error) { return json.Marshal(s) }

// readSnapshotRecord reads and checks the record of id.
func (p *Pool) readSnapshotRecord(id string) (Snapshot, error) {
	path := p.snapRecordPath(id)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Snapshot{}, fmt.Errorf("%w: %s", ErrSnapshotNotFound, id)
	}
	if err != nil {
		return Snapshot{}, err
	}
	return decodeSnapshotRecord(path, id, data)
}

// decodeSnapshotRecord is decodeRecord for a snapshot.
func decodeSnapshotRecord(path, id string, data []byte) (Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return Snapshot{}, fmt.Errorf("record %s: %w", path, err)
	}
	if err := checkHeader(path, "snapshot", id, s.Version, s.ID); err != nil {
		return Snapshot{}, err
	}
	return s, nil
}

// loadSnapshots is load for <dir>/snapshots: the same states, the same
// answers (see the table in the package doc).
func (p *Pool) loadSnapshots(repair bool) error {
	s, err := scanDir(p.sdir, validSnapshotID)
	if err != nil {
		return err
	}
	changed := false
	for id := range s.records {
		snap, err := p.readSnapshotRecord(id)
		if err != nil {
			klog.ErrorS(err, "Unreadable snapshot record; leaving it and its image", "snapshotID", id)
			continue
		}
		p.snaps.put(snap)
		switch {
		case !repair:
		case s.images[id] && s.tmpImages[id]:
			if err := p.quarantineFrom(p.sdir, tmpPrefix+id+imgSuffix); err != nil {
				return err
			}
			changed = true
		case s.tmpImages[id]:
			if err := unix.Rename(p.snapTmpImagePath(id), p.snapImagePath(id)); err != nil {
				return &os.LinkError{Op: "rename", Old: p.snapTmpImagePath(id), New: p.snapImagePath(id), Err: err}
			}
			klog.InfoS("Rolled forward an interrupted snapshot create or delete", "snapshotID", id, "name", snap.Name)
			changed = true
		}
		if !s.images[id] && !s.tmpImages[id] {
			klog.InfoS("Snapshot record without image: restores from it will fail", "snapshotID", id, "name", snap.Name)
		}
	}
	if !repair {
		return nil
	}
	for _, name := range s.tmpRecords {
		if err := removeGarbage(p.sdir + "/" + name); err != nil {
			return err
		}
		changed = true
	}
	for id := range s.tmpImages {
		if !s.records[id] {
			if err := removeGarbage(p.snapTmpImagePath(id)); err != nil {
				return err
			}
			changed = true
		}
	}
	for id := range s.images {
		if !s.records[id] {
			if err := p.quarantineFrom(p.sdir, id+imgSuffix); err != nil {
				return err
			}
			changed = true
		}
	}
	if changed {
		return fsync(p.sfd)
	}
	return nil
}

// snapIndex caches snapshot records for ListSnapshots, as index does for
// volumes; GetSnapshot re-reads the disk and refreshes it.
type snapIndex struct {
	mu     sync.RWMutex
	snaps  map[string]Snapshot
	sorted []Snapshot // by ID; nil when stale
}

func newSnapIndex() *snapIndex { return &snapIndex{snaps: map[string]Snapshot{}} }

func (x *snapIndex) put(s Snapshot) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.snaps[s.ID] = s
	x.sorted = nil
}

func (x *snapIndex) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.snaps[id]; ok {
		delete(x.snaps, id)
		x.sorted = nil
	}
}

// list returns the snapshots sorted by ID; the caller owns the result.
func (x *snapIndex) list() []Snapshot {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sorted == nil {
		x.sorted = slices.SortedFunc(maps.Values(x.snaps), func(a, b Snapshot) int { return strings.Compare(a.ID, b.ID) })
	}
	out := slices.Clone(x.sorted)
	for i := range out {
		out[i].Parameters = maps.Clone(out[i].Parameters)
	}
	return out
}
