package recordstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
)

// File names inside a store's directory. Only IDs that Config.Valid
// accepts are put into them.
const (
	// TmpPrefix starts the name of every file of an operation in progress;
	// the pool's temporary images share it.
	TmpPrefix = ".tmp-"
	// Suffix ends a record's name.
	Suffix = ".json"
	// OwnerSep separates a temporary file's ID from its owner's key
	// (Config.Owner); IDs never hold it. The pool's temporary images use
	// it too, so that one rule tells whose any temporary file is.
	OwnerSep = "@"
)

// CutOwner splits the ID part of a temporary file's name, <id> or
// <id>@<owner>, into the ID and the owner ("" when untagged).
func CutOwner(s string) (id, owner string) {
	id, owner, _ = strings.Cut(s, OwnerSep)
	return id, owner
}

// Tag is what follows an ID in the temporary files of owner: "" for no
// owner (Config.Owner).
func Tag(owner string) string {
	if owner == "" {
		return ""
	}
	return OwnerSep + owner
}

// Record is what a store keeps: a value that names its ID and format
// version, encoded as JSON.
type Record interface {
	// RecordID is the ID the record is stored under: <dir>/<id>.json.
	RecordID() string
	// RecordVersion is the format version the record carries.
	RecordVersion() int
}

// Config describes one store.
type Config[T Record] struct {
	// Dir is the directory of the records; it must exist.
	Dir string
	// Kind names a record in errors and logs ("volume", "snapshot").
	Kind string
	// Version is the one record version this store reads and writes.
	Version int
	// Valid accepts exactly the IDs that may become file names.
	Valid func(id string) error
	// NotFound is wrapped by Get when there is no record; Exists by
	// Draft.Commit when a record with that ID is there already.
	NotFound, Exists error
	// Weight, if set, is summed over the indexed records (Total), kept up
	// to date as they change so that reading it costs nothing.
	Weight func(T) int64
	// Owner tags the temporary records this store writes
	// (.tmp-<id>@<owner>.json.<random>), and Load's repair removes only
	// those: on a directory several hosts share, another host's temporary
	// record is a write in flight, whatever locks this host sees. Empty:
	// the directory has one writer at a time (a node-local pool, repaired
	// by the process that holds it alone), whose temporary records are
	// untagged as they always were, and every temporary record is its.
	// Only [0-9a-z] (a key, not a name): it becomes part of file names.
	Owner string
}

// Store is one directory of records and its index. Its methods are safe
// for concurrent use; callers serialise the operations on one ID.
type Store[T Record] struct {
	cfg Config[T]
	// fd is the directory held open, so each create costs one fsync(2)
	// of it, not open+fsync+close.
	fd   int
	sync *durable.DirSync
	idx  index[T]
	// gate keeps a Get's read and indexing of a record from straddling a
	// Remove of it: a reader of every record (a sweep) that read a file
	// just before Remove unlinked it would index it again after Remove
	// took it out, and List would show a record that is gone.
	gate sync.RWMutex
}

// Open opens the store in cfg.Dir. Call Load before using it.
func Open[T Record](cfg Config[T]) (*Store[T], error) {
	fd, err := durable.OpenDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Store[T]{cfg: cfg, fd: fd, idx: index[T]{recs: map[string]T{}, weight: cfg.Weight}}
	s.sync = durable.NewDirSync(func() error { return durable.Fsync(s.fd) })
	return s, nil
}

// Close releases the directory. The Store is unusable afterwards.
func (s *Store[T]) Close() error {
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}

// Dir is the store's directory.
func (s *Store[T]) Dir() string { return s.cfg.Dir }

// Path is the file of the record id.
func (s *Store[T]) Path(id string) string { return s.cfg.Dir + "/" + id + Suffix }

// Mark samples the directory's fsync failures before a change to the
// directory that Synced is to make durable (durable.DirSync): the caller's
// own files (images) beside the records share the records' fsync.
func (s *Store[T]) Mark() durable.SyncMark { return s.sync.Mark() }

// Synced waits for an fsync of the directory that started after it was
// called, shared with everyone waiting at once; an error when one that
// ended since m failed.
func (s *Store[T]) Synced(m durable.SyncMark) error {
	if err := s.sync.Wait(m); err != nil {
		return fmt.Errorf("sync %s: %w", s.cfg.Dir, err)
	}
	return nil
}

// Get reads the record id from disk (the truth: another process may share
// the directory) and refreshes the index with what it found, its absence
// included. An error wrapping NotFound when there is none; Valid's error
// for an ID that is not one.
func (s *Store[T]) Get(id string) (T, error) {
	var zero T
	if err := s.cfg.Valid(id); err != nil {
		return zero, err
	}
	path := s.Path(id)
	s.gate.RLock()
	defer s.gate.RUnlock()
	data, err := durable.ReadReplaced(path)
	if errors.Is(err, fs.ErrNotExist) {
		s.idx.remove(id)
		return zero, fmt.Errorf("%w: %s", s.cfg.NotFound, id)
	}
	if err != nil {
		return zero, err
	}
	rec, err := Decode[T](path, s.cfg.Kind, id, s.cfg.Version, data)
	if err != nil {
		return zero, err
	}
	s.idx.put(rec)
	return rec, nil
}

// Cached returns the indexed record id without touching the disk. Maps
// it holds are the index's: read only.
func (s *Store[T]) Cached(id string) (T, bool) { return s.idx.get(id) }

// Has reports whether the index holds id, without touching the disk.
func (s *Store[T]) Has(id string) bool {
	_, ok := s.idx.get(id)
	return ok
}

// List returns every indexed record sorted by ID (a stable order for
// pagination). The slice is the caller's; maps in the records are the
// index's, to be copied before they are changed.
func (s *Store[T]) List() []T { return s.idx.list() }

// Each calls fn for every indexed record, in no order, under the index's
// read lock: fn must not call the store.
func (s *Store[T]) Each(fn func(T)) { s.idx.each(fn) }

// Total is the sum of Config.Weight over the indexed records.
func (s *Store[T]) Total() int64 { return s.idx.totalWeight() }

// Encode is the on-disk form of a record: compact JSON (no indentation; a
// record is read by programs, and ~300 bytes keeps 1,000 of them cheap).
func Encode[T Record](rec T) ([]byte, error) { return json.Marshal(rec) }

// Decode parses the record of id read from path (named in errors, with
// kind). What it accepts is of version and holds id.
func Decode[T Record](path, kind, id string, version int, data []byte) (T, error) {
	var rec T
	if err := json.Unmarshal(data, &rec); err != nil {
		var zero T
		return zero, fmt.Errorf("record %s: %w", path, err)
	}
	if v := rec.RecordVersion(); v != version {
		var zero T
		return zero, fmt.Errorf("record %s: version %d, this filevol reads version %d", path, v, version)
	}
	if got := rec.RecordID(); got != id {
		var zero T
		return zero, fmt.Errorf("record %s holds %s ID %q", path, kind, got)
	}
	return rec, nil
}

// writeTemp writes data to a new temporary file beside the record of id
// and fsyncs it, so that the rename which publishes it publishes complete
// contents: without the fsync a crash could leave a committed, empty
// record. The random suffix keeps two processes sharing the directory from
// colliding.
func (s *Store[T]) writeTemp(id string, data []byte) (string, error) {
	name := s.cfg.Dir + "/" + TmpPrefix + id + Tag(s.cfg.Owner) + Suffix + "." + strconv.FormatUint(rand.Uint64(), 36)
	fd, err := durable.CreateExcl(name)
	if err != nil {
		return "", err
	}
	err = durable.WriteAll(fd, data)
	if err == nil {
		err = durable.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlink(name)
		return "", &os.PathError{Op: "write record", Path: name, Err: err}
	}
	return name, nil
}

// encode is Encode of a record this store may write.
func (s *Store[T]) encode(rec T) ([]byte, error) {
	if err := s.cfg.Valid(rec.RecordID()); err != nil {
		return nil, err
	}
	if v := rec.RecordVersion(); v != s.cfg.Version {
		return nil, fmt.Errorf("%s record %s: version %d, this filevol writes version %d", s.cfg.Kind, rec.RecordID(), v, s.cfg.Version)
	}
	return Encode(rec)
}

// Replace replaces the record of rec's ID atomically and durably:
// temporary file (fsynced), rename over the old one, shared directory
// fsync. The index follows once it is durable.
func (s *Store[T]) Replace(rec T) error {
	data, err := s.encode(rec)
	if err != nil {
		return err
	}
	id := rec.RecordID()
	tmp, err := s.writeTemp(id, data)
	if err != nil {
		return err
	}
	m := s.sync.Mark()
	if err := unix.Rename(tmp, s.Path(id)); err != nil {
		_ = unix.Unlink(tmp)
		return &os.LinkError{Op: "rename", Old: tmp, New: s.Path(id), Err: err}
	}
	if err := s.Synced(m); err != nil {
		return err
	}
	s.idx.put(rec)
	return nil
}

// Remove unlinks the record id (a delete's commit point) and forgets it;
// a missing record is no error. Not durable by itself: the caller took a
// Mark before its first change to the directory and waits with Synced
// after, once for all it changed.
func (s *Store[T]) Remove(id string) error {
	if err := s.cfg.Valid(id); err != nil {
		return err
	}
	s.gate.Lock()
	defer s.gate.Unlock()
	if err := unix.Unlink(s.Path(id)); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: s.Path(id), Err: err}
	}
	s.idx.remove(id)
	return nil
}
