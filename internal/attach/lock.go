package attach

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
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

// withLock runs fn holding the volume's lock file's OFD write lock. It
// waits for another holder: attach calls are short, and the sidecar's
// call has its own deadline. A lock file that was unlinked (Forget) while
// we waited is not the volume's lock any more: take the new one.
func (s *Store) withLock(volumeID string, fn func() error) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("attachments of volume %s: %w", volumeID, err)
	}
	for {
		f, err := openLockFile(s.lockPath(volumeID))
		if err != nil {
			return fmt.Errorf("lock attachments of volume %s: %w", volumeID, err)
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
		err = durable.IgnoringEINTR(func() error { return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk) })
		if err != nil {
			f.Close()
			return fmt.Errorf("lock attachments of volume %s: %w", volumeID, err)
		}
		if !sameFile(f, s.lockPath(volumeID)) {
			f.Close()
			continue
		}
		err = fn()
		f.Close() // releases the OFD lock
		return err
	}
}

// openLockFile opens the lock file at path, creating it if need be. On a
// network filesystem an O_CREAT open that races another client's create
// or unlink of the same name can fail with EEXIST or ENOENT: GlusterFS's
// FUSE client looked the name up, then its create or open met the other
// client's change (two controllers deleting one volume during a hand-over
// did, 1 run in 4). The name settles a moment later, so the open is
// tried again, for 5 s at most: half a second was not always enough with
// the host's two CPUs busy (an ENOENT after 50 tries, once in a make test
// beside a Kubernetes cluster's e2e suite).
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
