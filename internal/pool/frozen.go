package pool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Freeze marks: <dir>/frozen/<volume ID> is an empty file naming a volume
// whose filesystem the driver froze (FIFREEZE) to clone it and has not
// thawed yet. A frozen filesystem is kernel state that outlives the process
// that froze it: a driver killed between freeze and thaw leaves every
// writer of the pod blocked, and nobody else knows to thaw it. The mark is
// how the next start knows (csi thaws the marked volumes' filesystems,
// wherever they are mounted, before serving).
//
// Marks are empty (no data block: a snapshot on a full pool, which reflink
// can still cut, must not fail for want of one) and not fsynced: they only
// have to survive the death of the process, which the page cache does; a
// machine that crashes thaws every filesystem by rebooting, and a mark left
// over then names a filesystem that is not frozen, which thawing leaves
// alone. The directory is made by Open.
const frozenDirName = "frozen"

func (p *Pool) frozenDir() string { return filepath.Join(p.dir, frozenDirName) }

// MarkFrozen records that volume id's filesystem is about to be frozen.
// Call it before FIFREEZE; UnmarkFrozen after FITHAW.
func (p *Pool) MarkFrozen(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	fd, err := unix.Open(filepath.Join(p.frozenDir(), id), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("freeze mark: %w", wrapNoSpace(&os.PathError{Op: "create", Path: filepath.Join(p.frozenDir(), id), Err: err}))
	}
	return unix.Close(fd)
}

// UnmarkFrozen removes volume id's freeze mark; a missing one is no error.
func (p *Pool) UnmarkFrozen(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(p.frozenDir(), id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove freeze mark: %w", err)
	}
	return nil
}

// FrozenMarks returns the volume IDs of the marks a dead process left.
// When another process had the pool open as this one opened it, the marks
// may be that process's freezes in flight: none is returned.
func (p *Pool) FrozenMarks() ([]string, error) {
	if !p.alone {
		return nil, nil
	}
	entries, err := os.ReadDir(p.frozenDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if validID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
