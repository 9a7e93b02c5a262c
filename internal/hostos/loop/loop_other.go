//go:build !linux

package loop

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// Loop devices exist only on Linux; these stubs keep the package building
// (and its sysfs parsing testable) elsewhere.

func attach(context.Context, string, Options) (Device, error) {
	return Device{}, fmt.Errorf("loop: attach: %w", errors.ErrUnsupported)
}

func attachFile(context.Context, *os.File, Options) (Device, error) {
	return Device{}, fmt.Errorf("loop: attach: %w", errors.ErrUnsupported)
}

func detach(string) error { return fmt.Errorf("loop: detach: %w", errors.ErrUnsupported) }

func detachFile(string) error { return fmt.Errorf("loop: detach: %w", errors.ErrUnsupported) }

// Without loop devices there is no identity to compare: paths only.
func foreignMatch(Device, string) bool { return false }

func backedBy(Device, string) bool { return false }

func ownerOf(int) string { return "" }

func setCapacity(string) (int64, error) {
	return 0, fmt.Errorf("loop: set capacity: %w", errors.ErrUnsupported)
}

func locked(string) (bool, error) {
	return false, fmt.Errorf("loop: lock query: %w", errors.ErrUnsupported)
}

func unreachable(int) bool { return false }

func detachUnreachable(Device) error {
	return fmt.Errorf("loop: detach: %w", errors.ErrUnsupported)
}

func scheduler(Device) (string, error) {
	return "", fmt.Errorf("loop: scheduler: %w", errors.ErrUnsupported)
}

func nameOf(uint32, uint32) (string, bool) { return "", false }
