// Package attach keeps, in a shared pool, which nodes a volume is attached
// to: the controller's half of ControllerPublishVolume and
// ControllerUnpublishVolume. EBS and Cinder keep this in their cloud's
// API; filevol keeps it beside the volume, in the pool every node and
// every controller replica mounts, so that whoever leads after a hand-over
// reads the same answer.
//
// Layout: <pool>/attach/<volume ID>.json holds the volume's attachments;
// the volume's byte of <pool>/attach/.locks is locked (an OFD write lock,
// which a network filesystem carries to its server) while a controller
// reads and changes the record, so that two controllers during a leader
// hand-over never both attach one single-node volume to two nodes
// (lock.go says why one file, never unlinked).
//
// Every attachment carries an epoch: a number the record hands out once
// and never again. ControllerPublishVolume returns it in the
// publish_context, and NodeStageVolume checks that the record still
// holds that epoch for its node: a node that was detached (a force-detach
// of a node that went away) and comes back with an old publish_context is
// refused, even if the same node was attached again meanwhile.
//
// An attachment names the node's client of the pool's filesystem where
// the node noted one (CephFS): what the controller evicts to fence the
// node once it no longer answers (internal/csi/controller_evict.go).
//
// A change is durable when the call returns: written to a temporary file,
// fsynced, renamed over the record, and the directory fsynced.
//
// The package knows nothing of CSI, gRPC or the kernel's devices; its
// locks are internal/hostos/ofd's.
package attach

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/hostos/ofd"
)

// DirName is the directory of the records inside the pool.
const DirName = "attach"

const recordVersion = 1

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrAttachedElsewhere: a single-node volume is attached to another node.
	ErrAttachedElsewhere = errors.New("attached to another node")
	// ErrIncompatible: attached to this node, but not as asked (read-only
	// against read-write, single-node against multi-node).
	ErrIncompatible = errors.New("attached to this node with other options")
	// ErrNotAttached: the record does not hold the attachment a node names.
	ErrNotAttached = errors.New("not attached to this node")
	// ErrCorrupt: a record that cannot be read; never taken for "none".
	ErrCorrupt = errors.New("attachment record unreadable")
)

// Store is the attachment records of one pool, safe for concurrent use by
// any number of processes that share the pool.
type Store struct {
	dir string
	now func() time.Time
	// locks takes the volumes' attachment locks: the kernel's, or a fake
	// one where a test needs what a local filesystem never answers.
	locks ofd.Locker
}

// New returns the store of the pool at poolDir; its directory is made by
// the first attach.
func New(poolDir string) *Store {
	return &Store{dir: filepath.Join(poolDir, DirName), now: func() time.Time { return time.Now().UTC() }, locks: ofd.Kernel{}}
}

func (s *Store) recordPath(id string) string { return filepath.Join(s.dir, id+".json") }
func (s *Store) legacyLockPath(id string) string {
	return filepath.Join(s.dir, id+".lock")
}

// Attach records req's attachment and returns it. Idempotent: the same
// request again returns the attachment it made, epoch included.
//
// exists, when not nil, is asked under the volume's lock whether the
// volume still exists, and its error returned as is: a DeleteVolume in
// another controller (Retire) holds the same lock while it checks the
// record and deletes, so an attachment is never recorded for a volume
// being deleted or gone, which would leave a record nothing removes and
// tell the CO a deleted volume was attached.
func (s *Store) Attach(req Request, exists func() error) (Attachment, error) {
	var out Attachment
	err := s.change(req.VolumeID, func(r *Record) (bool, error) {
		if exists != nil {
			if err := exists(); err != nil {
				// Gone: any record goes (none can be left: Retire
				// removed it).
				if derr := s.drop(req.VolumeID); derr != nil {
					return false, errors.Join(err, derr)
				}
				return false, err
			}
		}
		if a, ok := r.Find(req.Node); ok {
			if a.ReadOnly != req.ReadOnly || a.SingleNode != req.SingleNode {
				return false, fmt.Errorf("volume %s on node %s (read-only %v, single-node %v; asked read-only %v, single-node %v): %w",
					req.VolumeID, req.Node, a.ReadOnly, a.SingleNode, req.ReadOnly, req.SingleNode, ErrIncompatible)
			}
			if req.Client == nil || a.Client != nil && *a.Client == *req.Client {
				out = a
				return false, nil
			}
			// The node's client mounted again since: the fence must
			// name the new one.
			i := slices.IndexFunc(r.Attachments, func(a Attachment) bool { return a.Node == req.Node })
			r.Attachments[i].Client = req.Client
			out = r.Attachments[i]
			return true, nil
		}
		for _, a := range r.Attachments {
			if req.SingleNode || a.SingleNode {
				return false, &ElsewhereError{VolumeID: req.VolumeID, Node: a.Node, Since: a.Since}
			}
		}
		r.LastEpoch++
		out = Attachment{Node: req.Node, ReadOnly: req.ReadOnly, SingleNode: req.SingleNode, Epoch: r.LastEpoch, Since: s.now(), Client: req.Client}
		r.Attachments = append(r.Attachments, out)
		return true, nil
	})
	return out, err
}

// Detach drops node's attachment of the volume. Idempotent: a volume or
// node without one is not an error.
//
// A volume without a record (never attached, or deleted: CSI answers OK,
// and the attacher retries) is answered without taking its lock. Reading
// no record first is safe: a concurrent Attach that makes one is ordered
// after this detach, which had nothing to drop.
func (s *Store) Detach(volumeID, node string) error {
	if _, err := os.Lstat(s.recordPath(volumeID)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return s.change(volumeID, func(r *Record) (bool, error) {
		i := slices.IndexFunc(r.Attachments, func(a Attachment) bool { return a.Node == node })
		if i < 0 {
			return false, nil
		}
		r.LastDetach = &Detachment{Node: node, Epoch: r.Attachments[i].Epoch, At: s.now(), Client: r.Attachments[i].Client}
		r.Attachments = slices.Delete(r.Attachments, i, i+1)
		return true, nil
	})
}

// Check says whether node holds the attachment of epoch: ErrNotAttached
// when it does not (never attached, detached since, or attached again
// under a later epoch).
func (s *Store) Check(volumeID, node string, epoch uint64) error {
	r, err := s.Of(volumeID)
	if err != nil {
		return err
	}
	a, ok := r.Find(node)
	switch {
	case !ok:
		return fmt.Errorf("volume %s, node %s: %w (attached to %v)", volumeID, node, ErrNotAttached, r.Nodes())
	case a.Epoch != epoch:
		return fmt.Errorf("volume %s, node %s: %w under epoch %d; it is attached under epoch %d since %s",
			volumeID, node, ErrNotAttached, epoch, a.Epoch, a.Since.Format(time.RFC3339))
	}
	return nil
}

// Of returns the volume's record; a volume never attached has an empty one.
func (s *Store) Of(volumeID string) (Record, error) {
	data, err := durable.ReadReplaced(s.recordPath(volumeID))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{Version: recordVersion, VolumeID: volumeID}, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("read attachments of volume %s: %w", volumeID, err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil || r.Version != recordVersion || r.VolumeID != volumeID {
		return Record{}, fmt.Errorf("%w: %s (version %d, volume %q, %v): restore it or remove it once no node uses the volume",
			ErrCorrupt, s.recordPath(volumeID), r.Version, r.VolumeID, err)
	}
	return r, nil
}

// Forget removes the volume's record, for DeleteVolume once the volume is
// gone. Idempotent.
func (s *Store) Forget(volumeID string) error {
	return s.Retire(volumeID, nil)
}

// Retire runs del with the volume's record under the volume's lock and,
// when del succeeds, removes the record: DeleteVolume's check that no node
// has the volume attached and its delete are one step for every
// controller sharing the pool (an Attach waits, then finds the volume
// gone). del's error is returned as is, and the record stays.
func (s *Store) Retire(volumeID string, del func(Record) error) error {
	return s.withLock(volumeID, func() error {
		if del != nil {
			r, err := s.Of(volumeID)
			if err != nil {
				return err
			}
			if err := del(r); err != nil {
				return err
			}
		}
		return s.drop(volumeID)
	})
}

// drop removes the volume's record, and the lock file an earlier
// version made for it (lockLegacy); the caller holds the lock.
func (s *Store) drop(volumeID string) error {
	s.removeDebris(volumeID)
	if err := os.Remove(s.recordPath(volumeID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove attachments of volume %s: %w", volumeID, err)
	}
	if err := os.Remove(s.legacyLockPath(volumeID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the earlier version's attachment lock of volume %s: %w", volumeID, err)
	}
	return nil
}

// change applies fn to the volume's record under its lock and, when fn
// says it changed something, writes the record durably.
func (s *Store) change(volumeID string, fn func(*Record) (bool, error)) error {
	return s.withLock(volumeID, func() error {
		r, err := s.Of(volumeID)
		if err != nil {
			return err
		}
		changed, err := fn(&r)
		if err != nil || !changed {
			return err
		}
		return s.write(r)
	})
}

// OfNode lists the volumes attached to node, for the attach limit. A
// record that cannot be read is an error: it may hold an attachment.
func (s *Store) OfNode(node string) ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read attachments: %w", err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		r, err := s.Of(strings.TrimSuffix(name, ".json"))
		if err != nil {
			return nil, err
		}
		if _, ok := r.Find(node); ok {
			out = append(out, r.VolumeID)
		}
	}
	return out, nil
}
