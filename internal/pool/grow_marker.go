package pool

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// growSuffix marks a volume whose filesystem is being grown offline
// (resize2fs on the unmounted device, issue 3). Unlike online growth, which
// the kernel journals, offline resize2fs is not atomic: killed half-way (a
// container restart kills it with the driver) it leaves a filesystem that
// e2fsck -p refuses to repair ("UNEXPECTED INCONSISTENCY"). The marker tells
// "our own resize was interrupted: repair it (e2fsck -y) and resize again"
// apart from damage of unknown origin, which is never repaired blindly. It
// is durable before resize2fs starts and removed once it finished.
const growSuffix = ".growing"

func (p *Pool) growMarkerPath(id string) string { return p.vdir + "/" + id + growSuffix }

// BeginGrow durably marks the volume's filesystem as being grown offline.
func (p *Pool) BeginGrow(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	synced := p.vsync.mark()
	fd, err := unix.Open(p.growMarkerPath(id), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return wrapNoSpace(&os.PathError{Op: "create", Path: p.growMarkerPath(id), Err: err})
	}
	_ = unix.Close(fd)
	return p.vsync.wait(synced)
}

// EndGrow removes the marker once the offline growth finished. Not
// fsynced: a crash that forgets the removal costs one e2fsck -y of a
// consistent filesystem, which changes nothing.
func (p *Pool) EndGrow(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := unix.Unlink(p.growMarkerPath(id)); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: p.growMarkerPath(id), Err: err}
	}
	return nil
}

// GrowInterrupted reports whether an offline growth of the volume's
// filesystem began and never finished.
func (p *Pool) GrowInterrupted(id string) bool {
	if validID(id) != nil {
		return false
	}
	_, err := os.Stat(p.growMarkerPath(id))
	return !errors.Is(err, os.ErrNotExist)
}
