package nodestate

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
)

// ErrNoSpace: the pool's filesystem has no room (or quota) left for a
// marker file.
var ErrNoSpace = errors.New("no space left in the pool for a marker file")

// Marker is one kind of marker file: <dir>/<id><suffix>, one per volume.
type Marker struct {
	dir, suffix string
	// durable: Set and Clear return once the directory is fsynced, so the
	// marker's presence survives a crash of the machine, not only of the
	// process.
	durable bool
	valid   func(id string) error
}

// Path is the marker file of volume id.
func (m *Marker) Path(id string) string { return m.dir + "/" + id + m.suffix }

// Set creates the marker of volume id (an existing one is kept).
func (m *Marker) Set(id string) error {
	if err := m.valid(id); err != nil {
		return err
	}
	path := m.Path(id)
	var fd int
	err := durable.IgnoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return noSpace(&os.PathError{Op: "create marker", Path: path, Err: err})
	}
	if err := unix.Close(fd); err != nil {
		return &os.PathError{Op: "close marker", Path: path, Err: err}
	}
	return m.sync()
}

// Clear removes the marker of volume id; a missing one is no error.
func (m *Marker) Clear(id string) error {
	if err := m.valid(id); err != nil {
		return err
	}
	if err := unix.Unlink(m.Path(id)); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove marker", Path: m.Path(id), Err: err}
	}
	return m.sync()
}

// IsSet reports whether volume id carries the marker. Only a marker that is
// certainly absent reads as unset; false for an invalid ID.
func (m *Marker) IsSet(id string) bool {
	if m.valid(id) != nil {
		return false
	}
	var st unix.Stat_t
	return unix.Stat(m.Path(id), &st) != unix.ENOENT
}

// IDs returns the volume IDs that carry the marker.
func (m *Marker) IDs() ([]string, error) {
	entries, err := os.ReadDir(m.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, ok := m.idOf(e.Name()); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// idOf returns the volume ID of a marker file's name.
func (m *Marker) idOf(name string) (string, bool) {
	if len(name) <= len(m.suffix) || name[len(name)-len(m.suffix):] != m.suffix {
		return "", false
	}
	id := name[:len(name)-len(m.suffix)]
	return id, m.valid(id) == nil
}

func (m *Marker) sync() error {
	if !m.durable {
		return nil
	}
	return durable.SyncDir(m.dir)
}

func noSpace(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}
