package attach

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/hostos/ofd"
)

func (s *Store) write(r Record) error {
	s.removeDebris(r.VolumeID)
	r.Version = recordVersion
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, tmpPrefix(r.VolumeID)+strconv.Itoa(os.Getpid()))
	if err := durable.Publish(tmp, s.recordPath(r.VolumeID), data, true); err != nil {
		return fmt.Errorf("record attachments of volume %s: %w", r.VolumeID, err)
	}
	return nil
}

// LocksName is the file, in the attachments' directory, whose byte ranges
// are the volumes' attachment locks: one byte per volume, at an offset
// taken from its ID (lockOffset). The file is made once and never
// unlinked. A lock file per volume, unlinked when the volume goes, would
// be simpler, but on GlusterFS a lock request on a file that another
// client unlinked and made again around the request's open never returns
// (docs/shared-pools-glusterfs.md): ControllerPublishVolume racing a
// delete in another controller replica would hang.
const LocksName = ".locks"

// lockSpace bounds the offsets of the volumes' locks. Two volumes whose
// IDs hash to one offset share a lock: one waits for the other's short
// critical section, nothing worse (no caller holds two volumes' locks).
// With 2^40 offsets, among a thousand volumes the chance that any two
// share one is about 1 in 2 million.
const lockSpace = 1 << 40

func lockOffset(volumeID string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(volumeID))
	return int64(h.Sum64() % lockSpace)
}

// withLock runs fn holding the volume's attachment lock: an OFD write
// lock on its byte of LocksName. It waits for another holder: attach
// calls are short, and the sidecar's call has its own deadline. Waiting
// in the kernel is safe here: the holder only ever unlocks (GlusterFS
// wakes a waiter at an unlock, not at a downgrade), on a file never
// unlinked.
func (s *Store) withLock(volumeID string, fn func() error) error {
	if err := s.makeDir(); err != nil {
		return fmt.Errorf("attachments of volume %s: %w", volumeID, err)
	}
	f, err := openLockFile(filepath.Join(s.dir, LocksName))
	if err != nil {
		return fmt.Errorf("lock attachments of volume %s: %w", volumeID, err)
	}
	defer f.Close() // releases the OFD lock
	if err := s.locks.Lock(f, ofd.Write, ofd.Range{Start: lockOffset(volumeID), Len: 1}); err != nil {
		return fmt.Errorf("lock attachments of volume %s: %w", volumeID, err)
	}
	legacy, err := s.lockLegacy(volumeID)
	if err != nil {
		return fmt.Errorf("lock attachments of volume %s: %w", volumeID, err)
	}
	defer legacy.Close()
	return fn()
}

// lockLegacy takes the volume's own lock file's OFD write lock too, when
// one is there: filevol before 2026-11-27 locked <volume ID>.lock, made
// it at the volume's first attach and unlinked it at its delete. Taking
// it keeps a replica of that version, still finishing its calls during a
// rolling upgrade, out of the record at the same time. This version
// never makes that file; it removes it with the volume (drop). The
// returned file is closed to release the lock; without a legacy file it
// is nil (Close on a nil *os.File is harmless).
func (s *Store) lockLegacy(volumeID string) (*os.File, error) {
	for {
		f, err := os.OpenFile(s.legacyLockPath(volumeID), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		err = s.locks.Lock(f, ofd.Write, ofd.Whole)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE) {
			// GlusterFS's answer to a lock on a file an old replica's
			// delete unlinked: look again.
			f.Close()
			continue
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		// An old replica's delete unlinked it while we waited: it is not
		// the volume's lock any more; look again.
		if sameFile(f, s.legacyLockPath(volumeID)) {
			return f, nil
		}
		f.Close()
	}
}

// makeDir makes the store's directory, with its LocksName, unless it is
// there. Replicas on several nodes may make it at once, at the first
// attach of a pool, and on GlusterFS two clients' mkdir of one name
// leaves the loser's client unable to make a file in the directory for a
// minute and more (ENOENT; TestMkdirRaceAcrossClients; met by
// TestTwoControllersRaceForOneVolume in make test). So each makes a
// directory of its own name, with the lock file in it, and renames it into
// place: a rename onto a directory that is not empty fails, and the loser
// removes its own and uses the winner's, which it never made.
func (s *Store) makeDir() error {
	if _, err := os.Stat(s.dir); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(s.dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(s.dir)+".new-")
	if err != nil {
		return err
	}
	locks := filepath.Join(tmp, LocksName)
	f, err := os.OpenFile(locks, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		err = os.Rename(tmp, s.dir)
		if err == nil {
			return nil
		}
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			err = nil // another replica's is in place
		}
	}
	_ = os.Remove(locks)
	_ = os.Remove(tmp)
	return err
}

// openLockFile opens the lock file at path, creating it if need be. On a
// network filesystem an O_CREAT open that races another client's create
// of the same name can fail with EEXIST or ENOENT: GlusterFS's FUSE
// client looked the name up, then its create or open met the other
// client's change (two controllers deleting one volume during a
// hand-over did, 1 run in 4, when every volume had a lock file made and
// unlinked with it). The name settles a moment later, so the open is
// tried again, for 5 s at most: half a second was not always enough with
// the host's two CPUs busy.
func openLockFile(path string) (*os.File, error) {
	var err error
	for start := time.Now(); time.Since(start) < 5*time.Second; {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, err
}

func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// tmpPrefix starts the temporary file of a volume's record.
func tmpPrefix(volumeID string) string { return "." + volumeID + ".tmp-" }

// removeDebris removes the temporary files of the volume's record that a
// controller killed between writing one and renaming it left behind. The
// caller holds the volume's lock, so no other writer of this record is at
// work: every such file is debris (its name carries the writer's PID,
// which another process, or the next start in a container, does not
// share).
func (s *Store) removeDebris(volumeID string) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix(volumeID)) {
			_ = os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
}
