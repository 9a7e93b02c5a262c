package csi

import (
	"context"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// Host is everything the services ask of the kernel. The real one (OSHost)
// goes to internal/hostos; unit tests may pass a fake. The services call it
// on every request instead of caching, so they always act on what the kernel
// shows now (after a restart, a reboot, or somebody's manual umount).
type Host interface {
	// Loop devices.
	FindLoop(backingFile string) ([]loop.Device, error)
	ListLoops() ([]loop.Device, error)
	AttachLoop(ctx context.Context, backingFile string, opts loop.Options) (loop.Device, error)
	DetachLoop(dev string) error
	// DetachImage detaches every device backed by the file; it checks the
	// backing file under an exclusive open, so a device number reused by
	// another volume in between is never detached by mistake.
	DetachImage(backingFile string) error
	// Mounts.
	Mounts() (mount.Table, error)
	Mount(source, target, fstype string, options []string) error
	Bind(source, target string, readOnly bool, options []string) error
	UnmountAll(target string) error
	// Filesystems.
	Probe(ctx context.Context, dev string) (string, error)
	Format(ctx context.Context, dev, fstype string) error
	StatFS(path string) (fs.Stats, error)
	BlockDeviceSize(dev string) (int64, error)
	// Snapshots and expansion (issue 3).
	SetLoopCapacity(dev string) (int64, error)
	FSSize(dev, fstype string) (int64, error)
	GrowFS(ctx context.Context, dev, mountPoint, fstype string) error
	GrowFSOffline(ctx context.Context, dev, fstype string, repair bool) error
	Freeze(mountPoint string) error
	Thaw(mountPoint string) error
}

// OSHost is the Host backed by the real kernel and programs.
type OSHost struct {
	Tools fs.Tools
	// PoolDir is the pool's directory as this process sees it. A loop
	// device attached by an earlier driver in another mount namespace (a
	// replaced pod) reports its backing file relative to that pod's mount;
	// ListLoops names such files by their path under PoolDir again.
	PoolDir string
}

// NewOSHost returns the real Host for the pool at poolDir.
func NewOSHost(poolDir string) *OSHost {
	return &OSHost{Tools: fs.Tools{R: fs.Exec{}}, PoolDir: poolDir}
}

func (OSHost) FindLoop(p string) ([]loop.Device, error) { return loop.Find(p) }
func (h OSHost) ListLoops() ([]loop.Device, error) {
	devs, err := loop.List()
	if err != nil || h.PoolDir == "" {
		return devs, err
	}
	return loop.ResolveUnder(devs, h.PoolDir), nil
}
func (OSHost) AttachLoop(ctx context.Context, p string, o loop.Options) (loop.Device, error) {
	return loop.Attach(ctx, p, o)
}
func (OSHost) DetachLoop(dev string) error  { return loop.Detach(dev) }
func (OSHost) DetachImage(p string) error   { return loop.DetachFile(p) }
func (OSHost) Mounts() (mount.Table, error) { return mount.Read() }
func (OSHost) Mount(src, dst, fstype string, o []string) error {
	return mount.Mount(src, dst, fstype, o)
}
func (OSHost) Bind(src, dst string, ro bool, o []string) error { return mount.Bind(src, dst, ro, o) }
func (OSHost) UnmountAll(target string) error                  { return mount.UnmountAll(target) }
func (h OSHost) Probe(ctx context.Context, dev string) (string, error) {
	return h.Tools.Probe(ctx, dev)
}
func (h OSHost) Format(ctx context.Context, dev, fstype string) error {
	return h.Tools.Format(ctx, dev, fstype)
}
func (OSHost) StatFS(p string) (fs.Stats, error)         { return fs.StatFS(p) }
func (OSHost) BlockDeviceSize(dev string) (int64, error) { return fs.BlockDeviceSize(dev) }
func (OSHost) SetLoopCapacity(dev string) (int64, error) { return loop.SetCapacity(dev) }
func (OSHost) FSSize(dev, fstype string) (int64, error)  { return fs.Size(dev, fstype) }
func (h OSHost) GrowFS(ctx context.Context, dev, mp, fstype string) error {
	return h.Tools.Grow(ctx, dev, mp, fstype)
}
func (h OSHost) GrowFSOffline(ctx context.Context, dev, fstype string, repair bool) error {
	return h.Tools.GrowOffline(ctx, dev, fstype, repair)
}
func (OSHost) Freeze(mountPoint string) error { return fs.Freeze(mountPoint) }
func (OSHost) Thaw(mountPoint string) error   { return fs.Thaw(mountPoint) }
