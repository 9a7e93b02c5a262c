package recordstore

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Scan is what one read of a store's directory found.
type Scan[T Record] struct {
	// Records are the IDs of every <id>.json, readable or not.
	Records map[string]bool
	// Loaded are the records read and checked (Load only); an unreadable
	// one is logged, left on disk and not indexed (an operator can look;
	// never guess).
	Loaded []T
	// TempRecords are the names of unpublished records
	// (.tmp-<id>.json.<random>, or .tmp-<id>@<owner>.json.<random>), every
	// owner's. Load removed its owner's if it repaired (Config.Owner).
	TempRecords []string
	// Others are the names the store does not own, for its caller to
	// classify (the pool's images, node markers, an operator's files).
	Others []string
}

// Scan classifies the names in the directory without reading a record.
func (s *Store[T]) Scan() (Scan[T], error) {
	f, err := os.Open(s.cfg.Dir)
	if err != nil {
		return Scan[T]{}, err
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return Scan[T]{}, err
	}
	sc := Scan[T]{Records: map[string]bool{}}
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, TmpPrefix); ok {
			if tagged, _, ok := strings.Cut(rest, Suffix+"."); ok {
				if id, _ := CutOwner(tagged); s.cfg.Valid(id) == nil {
					sc.TempRecords = append(sc.TempRecords, name)
					continue
				}
			}
		} else if id, ok := strings.CutSuffix(name, Suffix); ok && s.cfg.Valid(id) == nil {
			sc.Records[id] = true
			continue
		}
		sc.Others = append(sc.Others, name)
	}
	return sc, nil
}

// Load fills the index from the records and, when repair is set (no
// other process of the store's owner can be writing a temporary record),
// removes the unpublished records that the owner's interrupted writes
// left, durably: the owner's own only (Config.Owner), every one when the
// store has no owner. It returns what it found, for the caller to resolve
// its own files.
func (s *Store[T]) Load(repair bool) (Scan[T], error) {
	sc, err := s.Scan()
	if err != nil {
		return Scan[T]{}, err
	}
	for id := range sc.Records {
		rec, err := s.Get(id)
		if err != nil {
			klog.ErrorS(err, "Unreadable "+s.cfg.Kind+" record; leaving it and its files", s.cfg.Kind+"ID", id)
			continue
		}
		sc.Loaded = append(sc.Loaded, rec)
	}
	if !repair {
		return sc, nil
	}
	removed := false
	for _, name := range sc.TempRecords {
		if !s.ownTemp(name) {
			continue // another host's write in flight, or its to repair
		}
		if err := RemoveGarbage(s.cfg.Dir + "/" + name); err != nil {
			return Scan[T]{}, err
		}
		removed = true
	}
	if !removed {
		return sc, nil
	}
	return sc, s.SyncNow()
}

// ownTemp reports whether the temporary record name (one of Scan's
// TempRecords) is the store owner's to repair.
func (s *Store[T]) ownTemp(name string) bool {
	if s.cfg.Owner == "" {
		return true
	}
	tagged, _, _ := strings.Cut(strings.TrimPrefix(name, TmpPrefix), Suffix+".")
	_, owner := CutOwner(tagged)
	return owner == s.cfg.Owner
}

// SyncNow fsyncs the directory, for repairs at open (nobody to share with).
func (s *Store[T]) SyncNow() error { return s.Synced(s.sync.Mark()) }

// RemoveGarbage unlinks a temporary file of an interrupted operation (a
// missing one is no error) and logs it.
func RemoveGarbage(path string) error {
	if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: path, Err: err}
	}
	klog.InfoS("Removed a temporary file of an interrupted operation", "path", path)
	return nil
}

// Refresh makes the index what the directory holds now: every record
// read again (another process sharing the directory may have changed it),
// the new ones added, the ones gone dropped. For a directory several
// processes write (a shared pool), before an answer that lists records
// or sums them: the index alone only knows this process's own changes and
// the records it happened to read. A record that cannot be read is
// logged and left out, as Load does.
func (s *Store[T]) Refresh() error {
	sc, err := s.Scan()
	if err != nil {
		return err
	}
	for id := range sc.Records {
		if _, err := s.Get(id); err != nil && !errors.Is(err, s.cfg.NotFound) {
			klog.ErrorS(err, "Unreadable "+s.cfg.Kind+" record; leaving it out", s.cfg.Kind+"ID", id)
		}
	}
	for _, rec := range s.idx.list() {
		if !sc.Records[rec.RecordID()] {
			s.idx.remove(rec.RecordID())
		}
	}
	return nil
}
