package pool

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
)

// lockName is the lock file in the pool directory. Every open Pool holds a
// shared flock on it; Open repairs interrupted operations only when it can
// take the lock exclusively, that is when no other process has the pool
// open. Otherwise the other process's temporary files are in-flight work,
// not crash debris, and removing them would break its creates and deletes.
// flock is released by the kernel when a process dies, so a crashed owner
// never blocks repair.
const lockName = ".lock"

// lockPool opens the lock file and takes the lock: exclusive reports
// whether this Pool is the only one open and may repair. The caller calls
// sharePool when done repairing.
func lockPool(dir string) (fd int, exclusive bool, err error) {
	path := dir + "/" + lockName
	err = durable.IgnoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return -1, false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return fd, true, nil
	}
	if !durable.LockHeld(err) {
		_ = unix.Close(fd)
		return -1, false, fmt.Errorf("lock pool %s: %w", path, err)
	}
	// Someone else has the pool open: share it. This waits only while the
	// other process is itself repairing under the exclusive lock.
	if err := sharePool(fd, dir); err != nil {
		_ = unix.Close(fd)
		return -1, false, fmt.Errorf("lock pool %s: %w", path, err)
	}
	return fd, false, nil
}

// sharePool converts the lock to shared (or takes it shared). The
// conversion is not atomic: another Open may take the exclusive lock in
// between and repair, but this Open has finished its own repair and
// creates nothing until it returns, so there is nothing to break. It
// waits while another process repairs under the exclusive lock, asking
// anew rather than in the kernel (durable.WaitLock says why).
func sharePool(fd int, dir string) error {
	return durable.ShareFlock(fd, func() {
		klog.InfoS("Waiting for the pool's lock: another process holds it to repair the pool", "lock", filepath.Join(dir, lockName))
	})
}
