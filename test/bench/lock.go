package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockRoot takes an exclusive flock beside benchRoot, so a second bench
// on this machine waits instead of cleaning up the first one's devices.
// The kernel drops the lock when the process dies.
func lockRoot() (func(), error) {
	f, err := os.OpenFile(benchRoot+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		fmt.Fprintf(os.Stderr, "bench: waiting for another bench run (%s.lock)\n", benchRoot)
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	} else if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
