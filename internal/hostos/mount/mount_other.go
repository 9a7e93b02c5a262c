//go:build !linux

package mount

import (
	"errors"
	"fmt"
)

// mount(2) and its flags exist only on Linux; these stubs keep the package
// (and its mountinfo parser) building and testable elsewhere.

func mountFS(string, string, string, []string) error {
	return fmt.Errorf("mount: %w", errors.ErrUnsupported)
}

func bind(string, string, bool, []string) error {
	return fmt.Errorf("bind: %w", errors.ErrUnsupported)
}

func unmount(string) error { return fmt.Errorf("unmount: %w", errors.ErrUnsupported) }

func unmountAll(string) error { return fmt.Errorf("unmount: %w", errors.ErrUnsupported) }

func splitOptions([]string) (uintptr, string, error) {
	return 0, "", fmt.Errorf("mount options: %w", errors.ErrUnsupported)
}

func lookup(string) (Info, bool, error) {
	return Info{}, false, fmt.Errorf("statmount: %w", errors.ErrUnsupported)
}
