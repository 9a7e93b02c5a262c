package dirpool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/filevol/filevol/internal/volume"
	"golang.org/x/sys/unix"
)

// openVolume opens the volume's subvolume root, beneath the pool's root,
// following no symlink, and checks that it is the volume's subvolume.
func (p *Pool) openVolume(v Volume) (int, error) {
	fd, err := openBeneath(p.root, v.Path)
	if err != nil {
		return -1, err
	}
	if err := p.quota.isVolume(fd, v); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// OpenVolume opens the volume's subvolume root for the node to bind
// (through the descriptor, never a path a pod could change): the caller
// closes it.
func (p *Pool) OpenVolume(id string) (*os.File, error) {
	v, err := p.Record(id)
	if err != nil {
		return nil, err
	}
	fd, err := p.openVolume(v)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%w: the directory of volume %s (%s) is missing", volume.ErrImageMissing, id, v.Path)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(p.dir, v.Path)), nil
}

// Usage returns the bytes the volume's qgroup references and its limit,
// as of the filesystem's last transaction commit; for a volume whose size
// is not enforced, the pool filesystem's used and total bytes.
func (p *Pool) Usage(id string) (used, limit int64, err error) {
	v, err := p.Record(id)
	if err != nil {
		return 0, 0, err
	}
	return p.quota.usage(v)
}
