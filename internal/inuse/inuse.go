// Package inuse keeps, in the pool, where each volume is in use: one small
// record per volume and node, which the node writes before it attaches the
// volume (NodeStageVolume) and removes once it has detached it
// (NodeUnstageVolume). The controller decides from these records alone —
// DeleteVolume's in-use refusal, ListVolumes' published nodes, which node
// to ask for a freeze — so it needs nothing of its own host's kernel and
// may run in another process, on another host, against a pool it shares.
//
// Layout: <pool>/inuse/<volume ID>@<node key>.json, where the node key is
// 16 hex digits of sha256(node ID): node IDs may be 253 bytes long, and a
// file name holds 255.
//
// Order, and what a crash leaves: the record comes before the attach and
// goes after the detach, so the kernel never holds a device of a volume
// that no record names. A crash in between leaves a record without a
// device; the node drops such records of its own when it starts and at
// every garbage collection (Reconcile in internal/csi), and a retried
// unstage removes it too. A record is not fsynced: what it describes (an
// attached device) does not survive a reboot either, and a process that
// dies leaves it in the page cache, visible to every reader.
//
// What the controller cannot see: on a shared pool the node adds to its
// record the device it staged the volume through (Device) and, when it
// finds that device's detach pending because something still holds it
// open, what holds it (Pending): the controller names both when it
// refuses another node's attach (fencing), since it cannot look at this
// node's kernel. Both are optional fields of version 1: a record without
// them (an older node's) reads as before, and an older reader ignores
// them. So is Client, the node's client of the pool's filesystem where it
// has an identity a controller can evict (CephFS).
//
// The package knows nothing of CSI, gRPC or the kernel.
package inuse

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/filevol/filevol/internal/durable"
)

// DirName is the directory of the records inside the pool.
const DirName = "inuse"

const (
	recordVersion = 1
	sep           = "@"
	suffix        = ".json"
	tmpPrefix     = ".tmp-"
)

// Entry says that a volume is staged on a node.
type Entry struct {
	Version  int    `json:"version"`
	VolumeID string `json:"volumeID"`
	// Node is the node's ID (NodeGetInfo's node_id).
	Node string `json:"node"`
	// StagingPath is where the node staged it.
	StagingPath string `json:"stagingPath"`
	// Block: staged as a raw device; otherwise a filesystem is mounted
	// there, which a snapshot or clone freezes.
	Block bool `json:"block,omitempty"`
	// ReadOnly: staged through a read-only device.
	ReadOnly bool `json:"readOnly,omitempty"`
	// Since is when the node recorded it.
	Since time.Time `json:"since"`
	// Device is the device the node staged the volume through (the
	// image kind's loop device, /dev/loopN), when the node recorded it.
	Device string `json:"device,omitempty"`
	// Pending, when set, says that the node saw a detach of its device of
	// the volume deferred by the kernel: the device stays, and holds the
	// image, until whatever holds it open lets go.
	Pending *PendingDetach `json:"pendingDetach,omitempty"`
	// Client is the node's client of the pool's filesystem, on a shared
	// pool whose filesystem names its clients (CephFS, internal/sharedfs):
	// what a controller given the cluster's credentials evicts to fence a
	// node that is gone (internal/csi/controller_evict.go).
	Client *Client `json:"client,omitempty"`
}

// Client is a node's client of a shared filesystem: its kind ("cephfs"),
// its ID there (a CephFS client's global ID) and its cluster (the fsid).
type Client struct {
	Kind    string `json:"kind"`
	ID      uint64 `json:"id"`
	Cluster string `json:"cluster"`
}

// PendingDetach is a device whose detach waits for its last holder: the
// kernel marks a device detached while it is open (losetup -d does so and
// exits 0; sysfs loop/autoclear) and frees it at the last close.
type PendingDetach struct {
	// Device is the device, /dev/loopN.
	Device string `json:"device"`
	// Holders says, for a person, what holds it open: mounts, processes,
	// stacked devices (at most MaxHolders bytes).
	Holders string `json:"holders,omitempty"`
	// Seen is when the node last saw it so.
	Seen time.Time `json:"seen"`
}

// MaxHolders bounds PendingDetach.Holders, which Put cuts to it: records
// stay small whatever holds a device.
const MaxHolders = 512

// Store is the records of one pool. Its methods are safe for concurrent
// use, by any number of processes sharing the pool: each record has one
// writer, the node it names.
type Store struct {
	dir string
}

// New returns the store of the pool at poolDir. Its directory is made by
// the first Put: a pool nobody staged a volume of has none.
func New(poolDir string) *Store {
	return &Store{dir: filepath.Join(poolDir, DirName)}
}

// NodeKey is the part of a record's file name that names its node.
func NodeKey(node string) string {
	sum := sha256.Sum256([]byte(node))
	return hex.EncodeToString(sum[:8])
}

func (s *Store) path(volumeID, node string) string {
	return filepath.Join(s.dir, volumeID+sep+NodeKey(node)+suffix)
}

// Put records e (replacing the node's earlier record of the volume)
// atomically: a reader sees the old record or the new one, whole.
// volumeID must be a validated ID: it becomes a file name.
func (s *Store) Put(e Entry) error {
	e.Version = recordVersion
	if p := e.Pending; p != nil && len(p.Holders) > MaxHolders {
		cut := *p
		cut.Holders = strings.ToValidUTF8(cut.Holders[:MaxHolders-3], "") + "..."
		e.Pending = &cut
	}
	if e.Since.IsZero() {
		e.Since = time.Now().UTC()
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, tmpPrefix+NodeKey(e.Node)+"."+strconv.FormatUint(rand.Uint64(), 36))
	err = os.WriteFile(tmp, data, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(s.dir, 0o700); err == nil {
			err = os.WriteFile(tmp, data, 0o600)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("record volume %s in use on node %s: %w", e.VolumeID, e.Node, err)
	}
	if err := os.Rename(tmp, s.path(e.VolumeID, e.Node)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("record volume %s in use on node %s: %w", e.VolumeID, e.Node, err)
	}
	return nil
}

// Remove drops the node's record of the volume; none is not an error.
func (s *Store) Remove(volumeID, node string) error {
	err := os.Remove(s.path(volumeID, node))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("drop the in-use record of volume %s on node %s: %w", volumeID, node, err)
	}
	return nil
}

// Get returns the node's record of the volume, false when it has none:
// one read, where Of reads the directory.
func (s *Store) Get(volumeID, node string) (Entry, bool, error) {
	name := filepath.Base(s.path(volumeID, node))
	data, err := durable.ReadReplaced(s.path(volumeID, node))
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("read in-use record %s: %w", name, err)
	}
	e, err := s.parse(name, data)
	return e, err == nil, err
}

// Has reports whether the node has a record of the volume: one stat,
// where Of reads the directory. An error (other than none) says nothing.
func (s *Store) Has(volumeID, node string) (bool, error) {
	_, err := os.Lstat(s.path(volumeID, node))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Of returns where the volume is in use, sorted by node.
func (s *Store) Of(volumeID string) ([]Entry, error) {
	all, err := s.scan(func(name string) bool { return strings.HasPrefix(name, volumeID+sep) })
	return all[volumeID], err
}

// All returns every record, by volume ID.
func (s *Store) All() (map[string][]Entry, error) {
	return s.scan(func(string) bool { return true })
}

// OfNode returns the records of one node, by volume ID.
func (s *Store) OfNode(node string) (map[string][]Entry, error) {
	key := sep + NodeKey(node) + suffix
	return s.scan(func(name string) bool { return strings.HasSuffix(name, key) })
}

// scan reads the records whose file names keep says. A record that
// vanishes while it is read was removed: it is skipped. One that cannot
// be parsed is an error: the controller must not take "unreadable" for
// "not in use".
func (s *Store) scan(keep func(name string) bool) (map[string][]Entry, error) {
	out := map[string][]Entry{}
	names, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read in-use records: %w", err)
	}
	for _, de := range names {
		name := de.Name()
		if strings.HasPrefix(name, tmpPrefix) || !strings.HasSuffix(name, suffix) || !keep(name) {
			continue
		}
		data, err := durable.ReadReplaced(filepath.Join(s.dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read in-use record %s: %w", name, err)
		}
		e, err := s.parse(name, data)
		if err != nil {
			return nil, err
		}
		out[e.VolumeID] = append(out[e.VolumeID], e)
	}
	for _, es := range out {
		sort.Slice(es, func(i, j int) bool { return es[i].Node < es[j].Node })
	}
	return out, nil
}

// parse reads the record in the file name.
func (s *Store) parse(name string, data []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil || e.Version != recordVersion {
		return Entry{}, fmt.Errorf("in-use record %s/%s: unreadable (version %d, %v): remove it once the volume is known to be unstaged", s.dir, name, e.Version, err)
	}
	return e, nil
}

// CleanTemp removes temporary files the node left when it was killed in
// Put; only the node's own (their names carry its key), since other nodes
// sharing the pool may be writing theirs.
func (s *Store) CleanTemp(node string) {
	names, _ := os.ReadDir(s.dir)
	prefix := tmpPrefix + NodeKey(node) + "."
	for _, de := range names {
		if strings.HasPrefix(de.Name(), prefix) {
			_ = os.Remove(filepath.Join(s.dir, de.Name()))
		}
	}
}

// Nodes lists the nodes of entries, for messages and PublishedNodeIds.
func Nodes(entries []Entry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Node)
	}
	return out
}
