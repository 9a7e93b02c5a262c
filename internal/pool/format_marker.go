package pool

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// formatSuffix marks a volume whose first mkfs is in progress. mkfs is not
// atomic: a crash in the middle can leave a device whose signature is
// already there but whose filesystem cannot be mounted ("structure needs
// cleaning"), and filevol never formats a device that carries a signature.
// The marker is what tells "our own mkfs was interrupted, do it again"
// apart from "this holds someone's data" — it is durable before mkfs starts
// and durably gone before the filesystem is first mounted, so no data is
// ever written while it exists.
const formatSuffix = ".formatting"

func (p *Pool) formatMarkerPath(id string) string { return p.vdir + "/" + id + formatSuffix }

// BeginFormat durably marks the volume as being formatted.
func (p *Pool) BeginFormat(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	synced := p.vsync.mark()
	fd, err := unix.Open(p.formatMarkerPath(id), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return wrapNoSpace(&os.PathError{Op: "create", Path: p.formatMarkerPath(id), Err: err})
	}
	_ = unix.Close(fd)
	return p.vsync.wait(synced)
}

// EndFormat durably removes the marker; call it after mkfs succeeded and
// before the filesystem is mounted.
func (p *Pool) EndFormat(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	synced := p.vsync.mark()
	if err := unix.Unlink(p.formatMarkerPath(id)); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: p.formatMarkerPath(id), Err: err}
	}
	return p.vsync.wait(synced)
}

// FormatInterrupted reports whether a mkfs of the volume began and never
// finished.
func (p *Pool) FormatInterrupted(id string) bool {
	if validID(id) != nil {
		return false
	}
	_, err := os.Stat(p.formatMarkerPath(id))
	return !errors.Is(err, os.ErrNotExist)
}
