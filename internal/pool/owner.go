package pool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/hostos/ofd"
	"github.com/filevol/filevol/internal/recordstore"
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
//	<dir>/owners/<key>/owner    the owner's name, for people reading the pool
//	<dir>/owners/<key>/frozen/  the node's freeze marks (internal/nodestate)
//	.tmp-<id>@<key>.img         a temporary image of one of the owner's operations
//	.tmp-<id>@<key>.json.*      a temporary record of one (internal/recordstore)
const (
	ownersDir     = "owners"
	ownerLockName = "lock"
	ownerNameFile = "owner"
)

// DeviceOwner is what a node writes into the loop devices it attaches
// (loop.Options.Owner): "filevol/" and the node's owner key, within the
// 63 bytes the device keeps. The node half attaches with it; the node's
// garbage collector tells its own devices from other nodes' by it.
func DeviceOwner(node string) string { return "filevol/" + OwnerKey(node) }

// OwnerKey is the key that names an owner's files in a shared pool: 16 hex
// digits of sha256(owner), as internal/inuse names a node's records (the
// same node has the same key in both). A name may be 253 bytes long and
// hold any byte; the key fits any file name.
func OwnerKey(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:8])
}

// ownerDir is the directory of owner key's own state in the pool at dir.
func ownerDir(dir, key string) string { return filepath.Join(dir, ownersDir, key) }

// lockOwner makes the owner's directory and takes its owner lock:
// exclusive reports whether no other process of the owner has the pool
// open, so that this one may repair the owner's leftovers; the caller
// calls shareOwner when done. An OFD lock (fcntl), not flock: OFD locks
// are the ones NFS and GlusterFS enforce across their clients, and a
// controller's replicas, one owner, run on several hosts. Where the
// filesystem has no locks at all, the owner is taken as not alone: its
// leftovers wait (and are reported) rather than risk another process's
// writes in flight.
func lockOwner(dir, key, name string) (fd int, exclusive bool, err error) {
	odir := ownerDir(dir, key)
	if err := durable.EnsureDir(filepath.Dir(odir)); err != nil {
		return -1, false, err
	}
	if err := durable.EnsureDir(odir); err != nil {
		return -1, false, err
	}
	if err := writeOwnerName(odir, name); err != nil {
		return -1, false, err
	}
	path := filepath.Join(odir, ownerLockName)
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

// writeOwnerName records whose key the directory odir is, once: an
// operator reading .tmp-<id>@<key>.img in the pool can tell whose it is.
func writeOwnerName(odir, name string) error {
	path := filepath.Join(odir, ownerNameFile)
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, []byte(name+"\n")) {
		return nil
	}
	// Two processes of the owner may write it at once: each its own file.
	f, err := os.CreateTemp(odir, recordstore.TmpPrefix+ownerNameFile+"-*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(name + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// KnownOwner reports whether owner (a node ID) has opened the shared pool
// at dir: its name is under owners/. ControllerPublishVolume asks it, to
// answer NOT_FOUND for a node that cannot reach the pool (CSI: "node does
// not exist").
func KnownOwner(dir, owner string) bool {
	cur, err := os.ReadFile(filepath.Join(ownerDir(dir, OwnerKey(owner)), ownerNameFile))
	return err == nil && bytes.Equal(cur, []byte(owner+"\n"))
}

// KnownNode reports whether node has opened the pool (KnownOwner).
func (p *Pool) KnownNode(node string) bool { return KnownOwner(p.dir, node) }

// AnnounceOwner records, in the shared directory dir, that owner (a node
// ID) uses it, as a shared pool's open does: KnownOwner then finds it. A
// directory pool (internal/dirpool) shared by the nodes says so with it.
func AnnounceOwner(dir, owner string) error {
	odir := ownerDir(dir, OwnerKey(owner))
	if err := durable.EnsureDir(filepath.Dir(odir)); err != nil {
		return err
	}
	if err := durable.EnsureDir(odir); err != nil {
		return err
	}
	return writeOwnerName(odir, owner)
}
