package loop

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// setCapacity is the online half of a volume expansion: the caller has
// already grown the backing file; the device keeps its old size until told.
func setCapacity(devPath string) (int64, error) {
	fd, err := openFD(devPath, unix.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENXIO) {
		return 0, fmt.Errorf("loop: set capacity: %w: %w", ErrNotFound, err)
	}
	if err != nil {
		return 0, fmt.Errorf("loop: set capacity: %w", err)
	}
	defer unix.Close(fd)
	if _, err := identify(fd, devPath); err != nil {
		return 0, fmt.Errorf("loop: set capacity: %w", err)
	}
	if err := setCapacityFD(fd); err != nil {
		if errors.Is(err, unix.ENXIO) {
			return 0, fmt.Errorf("loop: set capacity %s: %w: not attached", devPath, ErrNotFound)
		}
		return 0, fmt.Errorf("loop: set capacity %s: LOOP_SET_CAPACITY: %w", devPath, err)
	}
	size, err := sizeBytes(fd)
	if err != nil {
		return 0, fmt.Errorf("loop: set capacity %s: BLKGETSIZE64: %w", devPath, err)
	}
	return size, nil
}
