package pool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/hostos/ofd"
	"github.com/filevol/filevol/internal/poolowner"
)

// Who may repair what an open finds: on a node-local pool the process
// that holds the pool lock alone repairs the whole pool; on a shared one
// the process that holds its owner's lock alone repairs that owner's
// files.

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
	if fd, err = openLock(path, unix.O_RDONLY); err != nil {
		return -1, false, err
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

// On a pool that several hosts share, nobody ever holds the pool alone:
// the pool lock above may be local to one host (it is on some FUSE and
// NFS setups), and even a lock every host sees would only say that
// nobody has the pool open, never whose the leftovers are. So each
// process that opens a shared pool says who it is (Options.Owner: a node,
// or a controller) and every temporary file it makes carries its owner's
// key; repair touches the files of its own key only, and only when no
// other process of that owner has the pool open (its owner lock, below).
//
//	<dir>/owners/<key>/lock     the owner lock: every open Pool of the owner holds it
//	<dir>/owners/<key>/owner    the owner's name (internal/poolowner)
//	<dir>/owners/<key>/frozen/  the node's freeze marks (internal/nodestate)
//	.tmp-<id>@<key>.img         a temporary image of one of the owner's operations
//	.tmp-<id>@<key>.json.*      a temporary record of one (internal/recordstore)
const ownerLockName = "lock"

// lockOwner makes the owner's directory (poolowner.Announce) and takes
// its owner lock: exclusive reports whether no other process of the owner
// has the pool open, so that this one may repair the owner's leftovers; the caller
// calls shareOwner when done. An OFD lock (fcntl), not flock: OFD locks
// are the ones NFS and GlusterFS enforce across their clients, and a
// controller's replicas, one owner, run on several hosts. Where the
// filesystem has no locks at all, the owner is taken as not alone: its
// leftovers wait (and are reported) rather than risk another process's
// writes in flight.
func lockOwner(dir, name string) (fd int, exclusive bool, err error) {
	if err := poolowner.Announce(dir, name); err != nil {
		return -1, false, err
	}
	path := filepath.Join(poolowner.Dir(dir, poolowner.Key(name)), ownerLockName)
	// Read-write: an OFD write lock needs a descriptor open for writing.
	if fd, err = openLock(path, unix.O_RDWR); err != nil {
		return -1, false, err
	}
	err = ofd.TryLockFD(fd, ofd.Write, ofd.Whole)
	switch {
	case err == nil:
		return fd, true, nil
	case errors.Is(err, ofd.ErrHeld):
		// Another process of this owner has the pool open: share it,
		// waiting only while that one repairs.
		if err := durable.WaitLock(func() error { return ofd.TryLockFD(fd, ofd.Read, ofd.Whole) }, func() {
			klog.InfoS("Waiting for the owner lock: another process of this owner holds it to repair its files", "lock", path)
		}); err != nil {
			_ = unix.Close(fd)
			return -1, false, fmt.Errorf("lock owner %s: %w", path, err)
		}
		return fd, false, nil
	case errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL):
		klog.ErrorS(err, "The pool filesystem does not lock files: this owner's leftovers are not repaired", "lock", path)
		return fd, false, nil
	default:
		_ = unix.Close(fd)
		return -1, false, fmt.Errorf("lock owner %s: %w", path, err)
	}
}

// shareOwner turns the exclusive owner lock into a shared one, atomically
// (an OFD lock converts in place): nobody else of the owner can take it
// exclusively meanwhile.
func shareOwner(fd int) error { return ofd.TryLockFD(fd, ofd.Read, ofd.Whole) }

// openLock opens the lock file at path, making it if need be, with mode
// (O_RDONLY or O_RDWR) as the lock it takes needs.
func openLock(path string, mode int) (fd int, err error) {
	err = durable.IgnoringEINTR(func() (err error) {
		fd, err = unix.Open(path, mode|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}
