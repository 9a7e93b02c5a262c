// Package errno names what a system call returned, for tests that report
// and compare what the kernel did (a write through a fenced device, a lock
// held elsewhere) in the words the kernel's documentation uses: EIO, not
// "input/output error".
package errno

import (
	"errors"
	"strconv"

	"golang.org/x/sys/unix"
)

// Name is err's errno name (EIO, EAGAIN, ...), "ok" for nil, "errno N" for
// an errno without a name, and the message of an error that wraps no errno.
func Name(err error) string {
	if err == nil {
		return "ok"
	}
	var en unix.Errno
	if errors.As(err, &en) {
		if n := unix.ErrnoName(en); n != "" {
			return n
		}
		return "errno " + strconv.Itoa(int(en))
	}
	return err.Error()
}
