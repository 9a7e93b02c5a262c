package hostos

import (
	"context"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// Loops is what the driver asks of loop devices (package loop documents
// each operation). Split from the mounts and the filesystem tools so that a
// test replaces only what it needs, and a reader sees which kernel object a
// call touches.
type Loops interface {
	// Find returns the devices backed by the file (see loop.Find).
	Find(backingFile string) ([]loop.Device, error)
	// List returns every attached device (see loop.List).
	List() ([]loop.Device, error)
	// Get reads one device, by name, and returns it when it is backed by
	// the file, matched as Find matches (see loop.Get).
	Get(name, backingFile string) (loop.Device, bool, error)
	// NameOf is the name (loopN) of the loop device major:minor (loop.NameOf).
	NameOf(major, minor uint32) (string, bool)
	// Index reads every device's backing file once, so that many files'
	// devices are found with one pass (see loop.Index).
	Index() (LoopIndex, error)
	Attach(ctx context.Context, backingFile string, opts loop.Options) (loop.Device, error)
	Detach(dev string) error
	// DetachFile detaches every device backed by the file; it checks the
	// backing file under an exclusive open, so a device number reused by
	// another volume in between is never detached by mistake.
	DetachFile(backingFile string) error
	// SetCapacity makes a device re-read its backing file's size.
	SetCapacity(dev string) (int64, error)
	// BackedBy reports whether the device's backing file is the file at
	// path by identity (device and inode), not by name (loop.BackedBy).
	BackedBy(d loop.Device, path string) bool
	// Owner is the Options.Owner the device was attached with (loop.Owner).
	Owner(d loop.Device) string
	// Holders says what keeps the device open: mounts, processes, stacked
	// devices (loop.Holders), for the message of a refused call.
	Holders(dev string) string
	// Named returns the devices whose backing path names the file, by
	// the path string alone (loop.Named).
	Named(path string) ([]loop.Device, error)
	// Unreachable reports whether the kernel can no longer stat the
	// device's backing file (a dead FUSE client's file): BackedBy and Owner
	// cannot tell whose it is (loop.Unreachable).
	Unreachable(d loop.Device) bool
	// DetachUnreachable detaches such a device while it stays attached to
	// the same path and unreachable (loop.DetachUnreachable).
	DetachUnreachable(d loop.Device) error
	// Locked reports whether anything holds a lock on the file: every
	// device attached with Options.Lock or Options.Mark does (loop.Locked).
	// One open and one F_OFD_GETLK, whatever the number of devices.
	Locked(backingFile string) (bool, error)
}

// LoopIndex finds devices by backing file from one pass over them; each
// device it returns is read again, whole, when it is returned.
type LoopIndex interface {
	Find(backingFile string) ([]loop.Device, error)
}

// Mounter is the mount table: reading it and changing it (package mount).
type Mounter interface {
	// Table is a snapshot of this process's mount table.
	Table() (mount.Table, error)
	// Lookup is the top mount at one path, without reading the table
	// (mount.Lookup); errors.ErrUnsupported on kernels before 6.8.
	Lookup(path string) (mount.Info, bool, error)
	Mount(source, target, fstype string, options []string) error
	Bind(source, target string, readOnly bool, options []string) error
	// UnmountAll unmounts every mount stacked at target; none is no error.
	UnmountAll(target string) error
}

// FSTools is what the driver asks of filesystems and block devices
// (package fs): probing, making and growing filesystems, sizes, usage and
// freezing.
type FSTools interface {
	// Probe returns the signature type on dev, "" when it carries none.
	Probe(ctx context.Context, dev string) (string, error)
	// Format makes fstype on dev, with at most one opts (fs.FormatOptions:
	// Encrypt for an ext4 that can hold encrypted directories); callers
	// Probe first (it never checks).
	Format(ctx context.Context, dev, fstype string, opts ...fs.FormatOptions) error
	// Size is the size the fstype superblock on dev says it covers.
	Size(dev, fstype string) (int64, error)
	Grow(ctx context.Context, dev, mountPoint, fstype string) error
	GrowOffline(ctx context.Context, dev, fstype string, repair bool) error
	StatFS(path string) (fs.Stats, error)
	BlockDeviceSize(dev string) (int64, error)
	Freeze(mountPoint string) error
	Thaw(mountPoint string) error
}

// Host bundles the seams the CSI services and the node view use.
// The services ask it on every request instead of caching, so they always
// act on what the kernel shows now (after a restart, a reboot, or
// somebody's manual umount). New returns the real one; package fake has a
// stateful one for unit tests that run without root.
type Host struct {
	Loops  Loops
	Mounts Mounter
	FS     FSTools
	// Keys are the filesystems' encryption keys and directories' policies
	// (fscrypt), for encrypted volumes.
	Keys fscrypt.Keys
}

// New returns the Host backed by the real kernel and programs, for the pool
// at poolDir (see OSLoops.PoolDir).
func New(poolDir string) Host {
	return Host{Loops: OSLoops{PoolDir: poolDir}, Mounts: OSMounter{}, FS: OSFS{Tools: fs.Tools{R: fs.Exec{}}},
		Keys: fscrypt.OS{}}
}
