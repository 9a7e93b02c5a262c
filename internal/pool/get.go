package pool

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volume"
)

// imageExists is one stat(2), no allocation: NodeGetVolumeStats and
// ControllerGetVolume ask it for every volume.
func (p *Pool) imageExists(id string) bool {
	if validID(id) != nil {
		return false
	}
	var st unix.Stat_t
	return unix.Stat(p.imagePath(id), &st) == nil
}

// get reads the record of id from disk and refreshes the index with what
// it found, including its absence.
func (p *Pool) get(id string) (volume.Volume, error) { return p.vols.Get(id) }

// openImage opens the image of volume id with flags (O_CLOEXEC added):
// ErrImageMissing when there is none.
func (p *Pool) openImage(id string, flags int) (int, error) {
	img := p.imagePath(id)
	var fd int
	if err := durable.IgnoringEINTR(func() (err error) {
		fd, err = unix.Open(img, flags|unix.O_CLOEXEC, 0)
		return err
	}); err != nil {
		if err == unix.ENOENT {
			return -1, fmt.Errorf("volume %s: %w (%s)", id, volume.ErrImageMissing, img)
		}
		return -1, &os.PathError{Op: "open", Path: img, Err: err}
	}
	return fd, nil
}
