package pool

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/volume"
)

// isNoSpace reports errors that mean the pool cannot hold the volume. EFBIG:
// the filesystem cannot hold a file that large at all.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG)
}

// wrapNoSpace makes err match ErrNoSpace when it is one of isNoSpace.
func wrapNoSpace(err error) error {
	if err != nil && isNoSpace(err) {
		return fmt.Errorf("%w: %w", volume.ErrNoSpace, err)
	}
	return err
}
