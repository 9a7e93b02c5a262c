package pool

import (
	"errors"

	"golang.org/x/sys/unix"
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
func (p *Pool) get(id string) (Volume, error) {
	if err := validID(id); err != nil {
		return Volume{}, err
	}
	v, err := p.readRecord(id)
	switch {
	case err == nil:
		p.idx.put(v)
	case errors.Is(err, ErrNotFound):
		p.idx.remove(id)
	}
	return v, err
}
