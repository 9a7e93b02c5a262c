package recordstore

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
)

// Draft is a new record on its way in, in three steps the caller
// interleaves with its own files (the pool's image):
//
//	Prepare   the record written to a temporary file and fsynced
//	Commit    renamed into place, never over a record: the commit point
//	Durable   the directory fsynced (shared), the record indexed
//
// Until Commit a crash leaves only a temporary file, which Load removes;
// after it, a record. Abandon undoes whichever steps were taken.
type Draft[T Record] struct {
	s         *Store[T]
	rec       T
	tmp       string
	committed bool
	mark      durable.SyncMark
}

// Prepare writes rec to a temporary file beside its record and fsyncs it.
// Nothing is committed: Abandon removes it.
func (s *Store[T]) Prepare(rec T) (*Draft[T], error) {
	data, err := s.encode(rec)
	if err != nil {
		return nil, err
	}
	tmp, err := s.writeTemp(rec.RecordID(), data)
	if err != nil {
		return nil, err
	}
	return &Draft[T]{s: s, rec: rec, tmp: tmp}, nil
}

// Commit publishes the record: a rename that never replaces, so a record
// already there (a duplicate create, another process's) is kept and
// Commit returns an error wrapping Config.Exists. The directory's fsync
// mark is taken here: the caller's changes to the directory after Commit
// (an image renamed into place) are made durable by Durable too.
func (d *Draft[T]) Commit() error {
	d.mark = d.s.sync.Mark()
	if err := durable.RenameNoReplace(d.tmp, d.s.Path(d.rec.RecordID())); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %s %s", d.s.cfg.Exists, d.s.cfg.Kind, d.rec.RecordID())
		}
		return err
	}
	d.committed = true
	return nil
}

// Durable waits for a directory fsync that started after Commit (shared
// with everyone waiting at once), then indexes the record. On an error
// the record is not durable and the caller undoes its files and the
// record (Abandon).
func (d *Draft[T]) Durable() error {
	if err := d.s.Synced(d.mark); err != nil {
		return err
	}
	d.s.idx.put(d.rec)
	return nil
}

// Abandon removes the temporary record, or the committed one (undoing
// the commit, for a create that fails after it). Not fsynced: a crash
// that forgets the removal leaves what a crash before it would have.
func (d *Draft[T]) Abandon() {
	if d.committed {
		_ = unix.Unlink(d.s.Path(d.rec.RecordID()))
		return
	}
	_ = unix.Unlink(d.tmp)
}
