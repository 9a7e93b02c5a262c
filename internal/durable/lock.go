package durable

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// lockPoll is how often WaitLock asks again; lockPatience is how long it
// waits before it tells its caller that it waits.
const (
	lockPoll     = 50 * time.Millisecond
	lockPatience = 5 * time.Second
)

// WaitLock takes a lock by calling try, a request that does not wait
// (flock with LOCK_NB, F_OFD_SETLK), again every 50 ms for as long as it
// fails because another holder's lock conflicts. After 5 s of that it calls
// waiting once (nil: nothing), so the caller can say what it waits for.
//
// It never waits in the kernel (flock without LOCK_NB, F_OFD_SETLKW): on
// GlusterFS 10 a waiting request is woken only when a holder unlocks, not
// when it turns an exclusive lock into a shared one, so a shared request
// queued behind a repair waited for good once the repairer had shared its
// lock (test/gluster TestWaitingLockNotWokenByDowngrade). A request made
// anew is judged against the locks held now, on every filesystem.
func WaitLock(try func() error, waiting func()) error {
	start := time.Now()
	for {
		err := IgnoringEINTR(try)
		if !LockHeld(err) {
			return err
		}
		if waiting != nil && time.Since(start) >= lockPatience {
			waiting()
			waiting = nil
		}
		time.Sleep(lockPoll)
	}
}

// ShareFlock takes fd's flock shared (or turns an exclusive one shared),
// through WaitLock: never waiting in the kernel.
func ShareFlock(fd int, waiting func()) error {
	return WaitLock(func() error { return unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) }, waiting)
}

// LockHeld reports whether err is a lock request's refusal because another
// holder's lock conflicts: EWOULDBLOCK (flock; EAGAIN on Linux) or EACCES
// (fcntl locks on some filesystems).
func LockHeld(err error) bool {
	return errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES)
}
