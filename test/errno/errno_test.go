package errno

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestName(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{unix.EIO, "EIO"},
		{&os.PathError{Op: "open", Path: "/dev/loop9", Err: unix.EAGAIN}, "EAGAIN"}, // wrapped, as os returns it
		{unix.Errno(4095), "errno 4095"},                                            // no name
		{errors.New("not a system call"), "not a system call"},
		{fmt.Errorf("flush: %w", unix.ENOSPC), "ENOSPC"},
	} {
		if got := Name(tc.err); got != tc.want {
			t.Errorf("Name(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
