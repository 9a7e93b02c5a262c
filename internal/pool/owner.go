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

// On a pool that several hosts share, nobody ever holds the pool alone:
// the flock of lock.go may be local to one host (it is on some FUSE and
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

// DeviceOwner is what a node writes into the loop devices it attaches
// (loop.Options.Owner): "filevol/" and the node's owner key, within the
// 63 bytes the device keeps. The node half attaches with it; the node's
// garbage collector tells its own devices from other nodes' by it.
func DeviceOwner(node string) string { return "filevol/" + poolowner.Key(node) }

// lockOwner makes the owner's directory (poolowner.Announce) and takes its owner lock:
// exclusive reports whether no other process of the owner has the pool
// open, so that this one may repair the owner's leftovers; the caller
// calls shareOwner when done. An OFD lock (fcntl), not flock: OFD locks
// are the ones NFS and GlusterFS enforce across their clients, and a
// controller's replicas, one owner, run on several hosts. Where the
// filesystem has no locks at all, the owner is taken as not alone: its
// leftovers wait (and are reported) rather than risk another process's
// writes in flight.
func lockOwner(dir, key, name string) (fd int, exclusive bool, err error) {
	if err := poolowner.Announce(dir, name); err != nil {
		return -1, false, err
	}
	path := filepath.Join(poolowner.Dir(dir, key), ownerLockName)
	err = durable.IgnoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return -1, false, &os.PathError{Op: "open", Path: path, Err: err}
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

// KnownNode reports whether node has opened the pool (poolowner.Known).
func (p *Pool) KnownNode(node string) bool { return poolowner.Known(p.dir, node) }
