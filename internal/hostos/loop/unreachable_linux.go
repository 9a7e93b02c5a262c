package loop

import (
	"errors"

	"golang.org/x/sys/unix"
)

// A device attached on a file of a FUSE filesystem whose client died (a
// node killed with a shared pool's volume staged, then brought back
// without a reboot: its client started again, the dead mount unmounted
// lazily) stays attached to that file. The kernel can no longer stat it:
// LOOP_GET_STATUS64, which stats the backing file for its device and
// inode, fails with ENOTCONN (measured: GlusterFS's client SIGKILLed, on
// kernel 6.18; the FUSE connection is gone for good, and every request on
// it fails so) — once the attributes the kernel cached for the file
// expire: FUSE's attribute timeout, 1 s by default, 0 on the clients
// docs/shared-pools-glusterfs.md requires; until then the call still
// answers from the cache. A client that is only cut off from its server
// answers ENOTCONN too once it gives up on the server (ping-timeout), and
// answers again when it reconnects (test/gluster: unreachable_test.go).
// ECONNABORTED is the dead state reached through fusectl's abort. Neither identity nor owner (loop_info64, returned by the same
// call) can be read any more; only sysfs's path remains, and after the
// lazy unmount it is relative to the dead mount's root
// ("/pool/volumes/x.img"). ESTALE is not one of them: an NFS handle goes
// stale when the file is gone on the server, which says nothing of whose
// device it is, and a retry can succeed.
//
// So such a device is recognised by name only (Names), and deciding that
// it is the caller's is the caller's: package loop only says that the
// kernel cannot identify it, and detaches it only while that stays so.

// unreachable reports whether loopN's backing file cannot be stat'ed
// because its filesystem's connection is dead.
func unreachable(n int) bool {
	fd, err := openFD(devPath(n), unix.O_RDONLY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	_, err = unix.IoctlLoopGetStatus64(fd)
	return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED)
}

// detachUnreachable detaches d while, under the exclusive open that blocks
// a re-attach, it is still attached to the same backing path and still
// unreachable: a number freed and handed to another file meanwhile is left
// alone.
func detachUnreachable(d Device) error {
	keep := func(x Device) bool {
		return x.BackingFile == d.BackingFile && x.Deleted == d.Deleted && unreachable(x.Number)
	}
	return detachNode(d.Path, keep, true)
}
