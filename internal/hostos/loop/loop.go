// Package loop attaches, finds, resizes and detaches Linux loop devices.
//
// Devices are configured with ioctls on /dev/loop-control and /dev/loopN
// (LOOP_CTL_GET_FREE, LOOP_CONFIGURE, LOOP_SET_CAPACITY, LOOP_CLR_FD); they
// are found through sysfs (/sys/block/loopN/loop/backing_file, .../ro),
// never by parsing losetup(8). The OFD locks a device holds on its backing
// file (Options.Lock, Options.Mark, Locked) are taken through package ofd,
// the one thing of filevol it imports. It must not import gRPC, CSI or pool.
package loop

import (
	"context"
	"errors"
	"os"
	"slices"
)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrNotFound: the device does not exist or is not attached.
	ErrNotFound = errors.New("loop device not found")
	// ErrBusy: the device is still in use (mounted or held open).
	ErrBusy = errors.New("loop device busy")
	// ErrNoDevice: no free loop device could be obtained.
	ErrNoDevice = errors.New("no free loop device")
	// ErrLocked: Options.Lock was asked and another open file description
	// (another node's device, on a filesystem that carries OFD locks
	// between hosts) holds a conflicting lock on the backing file.
	ErrLocked = errors.New("backing file locked by another holder")
)

// Device describes one attached loop device as sysfs shows it.
type Device struct {
	// Path is the device node, e.g. /dev/loop3.
	Path string
	// Number is N of /dev/loopN.
	Number int
	// BackingFile is the absolute path of the backing file as the kernel
	// reports it (without the " (deleted)" suffix; see Deleted).
	BackingFile string
	// Deleted is true when the kernel reports the backing file deleted.
	Deleted bool
	// ReadOnly is true when the device is read-only (/sys/block/loopN/ro).
	ReadOnly bool
	// DirectIO is true when the device uses direct I/O (.../loop/dio).
	DirectIO bool
	// Detaching is true when autoclear is set: filevol never sets it, so a
	// detach was deferred because another process holds the device open;
	// the kernel detaches it at that process's last close. Such a device
	// must not be reused.
	Detaching bool
	// SizeBytes is the device size in bytes (/sys/block/loopN/size * 512).
	SizeBytes int64
	// Major and Minor are the device numbers (/sys/block/loopN/dev).
	Major, Minor uint32
}

// Options controls Attach.
type Options struct {
	// ReadOnly attaches with LO_FLAGS_READ_ONLY and opens the file O_RDONLY.
	ReadOnly bool
	// DirectIO asks for LO_FLAGS_DIRECT_IO; when the backing filesystem
	// refuses it (EINVAL) the device is attached with buffered I/O instead.
	// Recent kernels (6.18 here) never refuse: they silently use buffered
	// I/O where O_DIRECT is impossible (e.g. ramfs). Device.DirectIO says
	// what the kernel actually does.
	DirectIO bool
	// BlockSize is the device's logical block size (LOOP_CONFIGURE
	// block_size: 512, 1024, 2048 or 4096). 0 leaves it to the kernel,
	// which with direct I/O uses the backing file's O_DIRECT alignment —
	// and on xfs that alignment grows from the sector size to the block
	// size once a file has shared extents (a reflink snapshot or clone),
	// so the same image would show different sector sizes over its life.
	BlockSize uint32
	// Lock makes the device hold an OFD lock on its backing file for as
	// long as it stays attached: a write lock, or a read lock with
	// ReadOnly. The lock is taken on the open file description the device
	// is configured on, so the kernel keeps it while the device exists,
	// whoever dies, and drops it when the device lets go of the file. It
	// is how a device on a shared pool fences another node's: Attach fails
	// with ErrLocked while a conflicting device holds the file.
	Lock bool
	// Mark, without Lock, makes the device hold a read lock on its
	// backing file for as long as it stays attached, as Lock's lock is
	// held, so that Locked(file) answers "does any device hold this
	// file?" without reading every device's sysfs. It fences nothing
	// (read locks do not conflict with each other) and is best effort: a
	// filesystem that refuses locks, or a conflicting lock another holder
	// has, leaves the device unmarked, so Locked's "no" is a proof only
	// together with a record of the caller's own.
	Mark bool
	// Scheduler, when set, is the I/O scheduler the device's queue gets
	// (queue/scheduler: "none", "mq-deadline", ...). A loop device's
	// queue keeps its scheduler across detach and attach, so without it a
	// device inherits whatever the last user of its number selected. Best
	// effort: a sysfs that refuses the write leaves the queue as it was
	// (Scheduler reads what it has).
	Scheduler string
	// Owner, when set, is written into the device (loop_info64's
	// lo_file_name, "owner:<Owner>", in place of the informational path:
	// sysfs, which everything reads the path from, is not affected): at
	// most 56 bytes naming who attached it. Processes that share one kernel and one file (several nodes
	// of a shared pool on one host) tell their devices apart by it,
	// where the backing file's path and identity are the same (Owner).
	Owner string
}

// Attach configures a free loop device for backingFile with one
// LOOP_CONFIGURE ioctl and returns it as sysfs reports it (BackingFile is
// the absolute path with symlinks resolved). It does not look for an
// existing device: callers that need idempotency call Find first under their
// own lock. It never sets LO_FLAGS_AUTOCLEAR: the device stays attached
// until Detach. A missing /dev/loopN node is created (no udev). Races with
// other processes for the free device are retried a bounded number of times
// (then ErrNoDevice); ctx is checked between attempts. The caller needs
// CAP_SYS_ADMIN (and CAP_MKNOD where no udev or devtmpfs makes nodes).
func Attach(ctx context.Context, backingFile string, opts Options) (Device, error) {
	return attach(ctx, backingFile, opts)
}

// AttachFile is Attach on a file the caller has opened: the device is
// configured on f's own open file description (LOOP_CONFIGURE takes a
// reference to it), where Attach opens the path itself and closes its fd.
// Whatever is tied to that open file description then lives as long as the
// device does, whoever closes f or dies: in particular an OFD lock
// (F_OFD_SETLK) taken through f is released only when the device lets go of
// the file (Detach, or the last close after a deferred detach). f must be
// open O_RDWR unless opts.ReadOnly is set; the caller may close f as soon as
// AttachFile returns. Device.BackingFile is what sysfs reports, as for
// Attach.
func AttachFile(ctx context.Context, f *os.File, opts Options) (Device, error) {
	return attachFile(ctx, f, opts)
}

// Locked reports whether a device attached with Options.Lock (or any other
// holder of an OFD or POSIX lock) holds a lock on backingFile that a
// writer's lock would conflict with. It opens the file read-only and takes
// no lock. On a filesystem without cross-host locks it sees this host's
// holders only.
func Locked(backingFile string) (bool, error) { return locked(backingFile) }

// Scheduler returns the I/O scheduler selected on the device's queue
// (see Options.Scheduler).
func Scheduler(d Device) (string, error) { return scheduler(d) }

// Owner returns the Options.Owner the device was attached with, "" for
// none or when the device cannot be read (not attached any more).
func Owner(d Device) string { return ownerOf(d.Number) }

// BackedBy reports whether d's backing file is the file at path by its
// identity: the device and inode the kernel holds for d
// (LOOP_GET_STATUS64) against stat(path); for a backing file already
// unlinked (d.Deleted), a file of the filesystem that holds path's
// directory. A path string never decides: the same path can name another
// file through another mount, as on a shared pool, where each node's
// client mount of the same filesystem is a device of its own, or after a
// remount over a dead one.
func BackedBy(d Device, path string) bool { return backedBy(d, path) }

// Unreachable reports whether the kernel cannot identify d's backing file
// any more: LOOP_GET_STATUS64 fails with ENOTCONN or ECONNABORTED, as for
// a file of a FUSE filesystem whose client died (unreachable_linux.go).
// BackedBy and Owner then say false and "" whoever attached d.
func Unreachable(d Device) bool { return unreachable(d.Number) }

// Names reports whether d's backing path, as sysfs shows it, names the
// file at path: path itself (or with symlinks resolved), or a suffix of it
// starting at "/", which is how the kernel shows a file opened through a
// mount that is no longer reachable from here (identity.go). It is a name,
// not an identity: callers that act on it must know otherwise that the
// device is theirs (see Unreachable).
func Names(d Device, path string) bool { return namer(path)(d) }

// namer returns Names's test for path, with path resolved once.
func namer(path string) func(Device) bool {
	want := matchPaths(path)
	return func(d Device) bool { return slices.Contains(want, d.BackingFile) || mountRelative(d, want[0]) }
}

// Named returns every attached device whose backing path Names path, in
// device-number order: the devices Find returns, and those whose file
// cannot be identified any more (Unreachable) under a name of that file.
// Like Find it reads only the backing file of the devices it rejects.
func Named(path string) ([]Device, error) {
	return scan(sysBlock, namer(path))
}

// DetachUnreachable detaches d, an Unreachable device, as Detach does,
// but only while it is still attached to the same backing path and still
// unreachable (checked under Detach's exclusive open, which blocks a
// re-attach): a number freed and reused meanwhile is left alone (nil).
func DetachUnreachable(d Device) error { return detachUnreachable(d) }

// Find returns every attached loop device whose backing file is path
// (compared after filepath.Clean; a path through symlinks also matches,
// since the kernel reports the resolved path), in device-number order.
// Devices whose backing file was deleted still match, with Deleted set.
// A device attached from another mount namespace, whose backing file sysfs
// reports relative to a mount we cannot reach (a replaced driver pod's), is
// matched by the file's device and inode; only such a device is opened
// (read-only, not exclusively), everything else is read from sysfs.
func Find(path string) ([]Device, error) { return find(path) }

// Get returns the device named name (loopN or /dev/loopN) when it is
// attached and backed by path, matched as Find matches; ok is false when
// it is not. It reads that one device, where Find reads every device on
// the host: for a caller that knows which device to ask about (the one
// mounted at a volume's staging path).
func Get(name, path string) (d Device, ok bool, err error) { return get(sysBlock, name, path) }

// NameOf returns the name (loopN) of the loop device numbered major:minor,
// false when that number is not a loop device (sysfs's /sys/dev/block).
func NameOf(major, minor uint32) (string, bool) { return nameOf(major, minor) }

// List returns every attached loop device, in device-number order,
// including devices filevol did not create.
func List() ([]Device, error) { return list() }

// ResolveUnder returns devs with the backing file of each device attached
// from another mount namespace (see Find) rewritten to the path under dir
// that names the same file, so that callers which know their files by path
// under dir recognise it. Other devices are returned unchanged.
func ResolveUnder(devs []Device, dir string) []Device { return resolveUnder(devs, dir) }

// Detach clears the device (LOOP_CLR_FD). A device that is already detached
// is not an error, nor is a missing /dev/loopN node for a device sysfs shows
// unattached. A device still held returns an error wrapping ErrBusy:
//
//   - mounted (or otherwise claimed exclusively): nothing is changed;
//   - held open by a process: the kernel has marked it to detach at the
//     last close (LO_FLAGS_AUTOCLEAR), and a later Detach returns nil.
//
// A bind mount of the device node (a published block volume) holds neither,
// so Detach cannot see it: unpublish before detaching. A devPath that is not
// a loop device returns an error wrapping ErrNotFound.
//
// A device path is only a name for whatever is attached there now: once
// freed, the number is handed to the next Attach on the host. Do not retry
// Detach with a recorded path after it succeeded; use DetachFile.
func Detach(devPath string) error { return detach(devPath) }

// DetachFile detaches every loop device backed by backingFile (matched like
// Find) and returns nil when there is none. Each device's backing file is
// checked while Detach's exclusive open blocks re-attachment, so a device
// number freed and reused by someone else meanwhile is never cleared. Errors
// are as for Detach, joined when several devices fail.
func DetachFile(backingFile string) error { return detachFile(backingFile) }

// SetCapacity makes the kernel re-read the backing file's size
// (LOOP_SET_CAPACITY) and returns the new device size in bytes
// (BLKGETSIZE64). Grow the backing file first. A device that does not exist
// or is not attached returns an error wrapping ErrNotFound.
func SetCapacity(devPath string) (int64, error) { return setCapacity(devPath) }

// ForeignMount marks a busy error whose device is mounted only in mount
// namespaces other than the caller's: typically a copy of the host's mount
// table that another program's new namespace (a container's, a test
// server's) still holds. The caller's own unmount cannot release it; the
// device frees when that program drops its copy.
const ForeignMount = "mounted in another mount namespace"

// MountedHere marks a busy error whose device is still mounted in the
// caller's own mount namespace.
const MountedHere = "mounted in this mount namespace"
