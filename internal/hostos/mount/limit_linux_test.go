package mount

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// mount(2) returns ENOSPC only when the mount namespace would exceed
// fs.mount-max: it is reported as ErrTableFull (RESOURCE_EXHAUSTED to the
// CO), and every other errno is left as it is. Filling a real namespace to
// the default limit of 100,000 (bind mounts in a private namespace of its
// own) did not finish within ten minutes on a loaded 2-CPU machine: too
// long for a test on a shared host.
func TestTableFullMarksOnlyENOSPC(t *testing.T) {
	if err := tableFull(unix.ENOSPC); !errors.Is(err, ErrTableFull) || !errors.Is(err, unix.ENOSPC) {
		t.Errorf("tableFull(ENOSPC) = %v, want ErrTableFull wrapping ENOSPC", err)
	}
	for _, e := range []error{unix.EBUSY, unix.EINVAL, unix.ENOMEM} {
		if err := tableFull(e); errors.Is(err, ErrTableFull) || !errors.Is(err, e) {
			t.Errorf("tableFull(%v) = %v, want %v unchanged", e, err, e)
		}
	}
}
