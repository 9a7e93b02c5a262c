//go:build !linux

package fs

import (
	"errors"
	"fmt"
)

// statfs fields, BLKGETSIZE64 and the freeze ioctls are Linux's; these
// stubs keep the package building elsewhere.

func statFS(string) (Stats, error) { return Stats{}, fmt.Errorf("statfs: %w", errors.ErrUnsupported) }

func blockDeviceSize(string) (int64, error) {
	return 0, fmt.Errorf("device size: %w", errors.ErrUnsupported)
}

func freeze(string) error { return fmt.Errorf("freeze: %w", errors.ErrUnsupported) }

func thaw(string) error { return fmt.Errorf("thaw: %w", errors.ErrUnsupported) }

func checkMountRoot(string) error { return fmt.Errorf("mount root: %w", errors.ErrUnsupported) }

func hasCapSysResource() bool { return true }
