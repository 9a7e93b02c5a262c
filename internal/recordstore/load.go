package recordstore

import (
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
	// (.tmp-<id>.json.<random>). Load removed them if it repaired.
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
			if id, _, ok := strings.Cut(rest, Suffix+"."); ok && s.cfg.Valid(id) == nil {
				sc.TempRecords = append(sc.TempRecords, name)
				continue
			}
		} else if id, ok := strings.CutSuffix(name, Suffix); ok && s.cfg.Valid(id) == nil {
			sc.Records[id] = true
			continue
		}
		sc.Others = append(sc.Others, name)
	}
	return sc, nil
}

// Load fills the index from the records and, when repair is set (the
// caller holds the directory alone: no other process can be writing a
// temporary record), removes the unpublished records interrupted writes
// left, durably. It returns what it found, for the caller to resolve its
// own files.
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
	if !repair || len(sc.TempRecords) == 0 {
		return sc, nil
	}
	for _, name := range sc.TempRecords {
		if err := RemoveGarbage(s.cfg.Dir + "/" + name); err != nil {
			return Scan[T]{}, err
		}
	}
	return sc, s.SyncNow()
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
