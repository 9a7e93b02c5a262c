package hostos

import (
	"context"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// OSLoops is Loops on the real kernel.
type OSLoops struct {
	// PoolDir is the pool's directory as this process sees it. A loop
	// device attached by an earlier driver in another mount namespace (a
	// replaced pod) reports its backing file relative to that pod's mount;
	// List names such files by their path under PoolDir again.
	PoolDir string
}

func (OSLoops) Find(p string) ([]loop.Device, error) { return loop.Find(p) }

func (OSLoops) Get(name, p string) (loop.Device, bool, error) { return loop.Get(name, p) }
func (OSLoops) NameOf(major, minor uint32) (string, bool)     { return loop.NameOf(major, minor) }

func (OSLoops) Index() (LoopIndex, error) {
	ix, err := loop.ReadIndex()
	if err != nil {
		return nil, err
	}
	return ix, nil
}

func (l OSLoops) List() ([]loop.Device, error) {
	devs, err := loop.List()
	if err != nil || l.PoolDir == "" {
		return devs, err
	}
	return loop.ResolveUnder(devs, l.PoolDir), nil
}

func (OSLoops) Attach(ctx context.Context, p string, o loop.Options) (loop.Device, error) {
	return loop.Attach(ctx, p, o)
}
func (OSLoops) Detach(dev string) error               { return loop.Detach(dev) }
func (OSLoops) DetachFile(p string) error             { return loop.DetachFile(p) }
func (OSLoops) SetCapacity(dev string) (int64, error) { return loop.SetCapacity(dev) }
func (OSLoops) BackedBy(d loop.Device, p string) bool { return loop.BackedBy(d, p) }
func (OSLoops) Locked(p string) (bool, error)         { return loop.Locked(p) }
func (OSLoops) Owner(d loop.Device) string            { return loop.Owner(d) }
func (OSLoops) Holders(dev string) string             { return loop.Holders(dev) }
func (OSLoops) Named(p string) ([]loop.Device, error) { return loop.Named(p) }
func (OSLoops) Unreachable(d loop.Device) bool        { return loop.Unreachable(d) }
func (OSLoops) DetachUnreachable(d loop.Device) error { return loop.DetachUnreachable(d) }

// OSMounter is Mounter on the real kernel.
type OSMounter struct{}

func (OSMounter) Table() (mount.Table, error)               { return mount.Read() }
func (OSMounter) Lookup(p string) (mount.Info, bool, error) { return mount.Lookup(p) }
func (OSMounter) Mount(src, dst, fstype string, o []string) error {
	return mount.Mount(src, dst, fstype, o)
}
func (OSMounter) Bind(src, dst string, ro bool, o []string) error { return mount.Bind(src, dst, ro, o) }
func (OSMounter) UnmountAll(target string) error                  { return mount.UnmountAll(target) }

// OSFS is FSTools with the real programs (Tools) and syscalls.
type OSFS struct{ fs.Tools }

func (OSFS) Size(dev, fstype string) (int64, error)    { return fs.Size(dev, fstype) }
func (OSFS) StatFS(p string) (fs.Stats, error)         { return fs.StatFS(p) }
func (OSFS) BlockDeviceSize(dev string) (int64, error) { return fs.BlockDeviceSize(dev) }
func (OSFS) Freeze(mountPoint string) error            { return fs.Freeze(mountPoint) }
func (OSFS) Thaw(mountPoint string) error              { return fs.Thaw(mountPoint) }
