package dirpool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/pool"
)

// openVolume opens the volume's subvolume root, beneath the pool's root,
// following no symlink, and checks that it is the volume's subvolume.
func (p *Pool) openVolume(v Volume) (int, error) {
	fd, err := openBeneath(p.root, v.Path)
	if err != nil {
		return -1, err
	}
	if err := p.checkSubvolume(fd, v); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (p *Pool) checkSubvolume(fd int, v Volume) error {
	if v.Unenforced {
		return p.checkPlain(fd, v)
	}
	root, err := isSubvolumeRoot(fd)
	if err != nil {
		return err
	}
	id, err := subvolumeID(fd)
	if err != nil {
		return err
	}
	if !root || id != v.Subvolume {
		return fmt.Errorf("%w: %s holds subvolume %d (a subvolume's root: %t), volume %s is subvolume %d",
			ErrNotVolume, v.Path, id, root, v.ID, v.Subvolume)
	}
	return nil
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
			return nil, fmt.Errorf("%w: the directory of volume %s (%s) is missing", pool.ErrImageMissing, id, v.Path)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(p.dir, v.Path)), nil
}

// Usage returns the bytes the volume's qgroup references and its limit,
// as of the filesystem's last transaction commit.
func (p *Pool) Usage(id string) (used, limit int64, err error) {
	v, err := p.Record(id)
	if err != nil {
		return 0, 0, err
	}
	if v.Unenforced {
		return p.fsUsage()
	}
	return p.usage(v)
}
