package pool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Freeze marks: <dir>/frozen/<volume ID> holds the mount point of a
// filesystem the driver froze (FIFREEZE) to clone its volume and has not
// thawed yet. A frozen filesystem is kernel state that outlives the process
// that froze it: a driver killed between freeze and thaw leaves every
// writer of the pod blocked, and nobody else knows to thaw it. The mark is
// how the next start knows (csi thaws what the marks name before serving).
//
// Marks are not fsynced: they only have to survive the death of the
// process, which the page cache does; a machine that crashes thaws every
// filesystem by rebooting, and a mark left over then names a filesystem
// that is not frozen, which thawing leaves alone.
const frozenDirName = "frozen"

func (p *Pool) frozenDir() string { return filepath.Join(p.dir, frozenDirName) }

// MarkFrozen records that volume id's filesystem, mounted at mountPoint, is
// about to be frozen. Call it before FIFREEZE; UnmarkFrozen after FITHAW.
func (p *Pool) MarkFrozen(id, mountPoint string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := os.Mkdir(p.frozenDir(), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("freeze mark: %w", err)
	}
	path := filepath.Join(p.frozenDir(), id)
	if err := os.WriteFile(path, []byte(mountPoint), 0o600); err != nil {
		return fmt.Errorf("freeze mark: %w", wrapNoSpace(err))
	}
	return nil
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

// FrozenMarks returns the marks left by a dead process: volume ID → mount
// point. When another process had the pool open as this one opened it,
// the marks may be that process's freezes in flight: none is returned.
func (p *Pool) FrozenMarks() (map[string]string, error) {
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
	marks := map[string]string{}
	for _, e := range entries {
		if validID(e.Name()) != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(p.frozenDir(), e.Name()))
		if err != nil {
			return nil, err
		}
		marks[e.Name()] = strings.TrimSpace(string(data))
	}
	return marks, nil
}
