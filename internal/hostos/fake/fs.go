package fake

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// SetSignature makes backing carry a signature of type sig covering size
// bytes, as if written before (a filesystem with data, or something
// filevol must never format over: "LVM2_member", "dos"); "" wipes it.
func (h *Host) SetSignature(backing, sig string, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sig == "" {
		delete(h.fs, resolve(backing))
		return
	}
	h.fs[resolve(backing)] = &filesystem{Type: sig, Size: size}
}

// Signature returns what backing carries and the size its superblock says.
func (h *Host) Signature(backing string) (string, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.fs[resolve(backing)]; f != nil {
		return f.Type, f.Size
	}
	return "", 0
}

// SetStats makes statfs of backing's filesystem answer st.
func (h *Host) SetStats(backing string, st fs.Stats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats[resolve(backing)] = st
}

// Probe implements hostos.FSTools.
func (h *Host) Probe(ctx context.Context, dev string) (string, error) {
	return call(h, "Probe", "probe", []any{dev}, func() (string, error) {
		d, err := h.blockDevice(dev)
		if err != nil {
			return "", err
		}
		if f := h.fs[d.BackingFile]; f != nil {
			return f.Type, nil
		}
		return "", nil
	})
}

// Format implements hostos.FSTools: like mkfs -f, it never checks.
func (h *Host) Format(ctx context.Context, dev, fstype string, opts ...fs.FormatOptions) error {
	var o fs.FormatOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	args := []any{dev, fstype}
	if o.Encrypt {
		args = append(args, "encrypt")
	}
	return h.do("Format", "format", args, func() error {
		if o.Encrypt && fstype != "ext4" {
			return fmt.Errorf("format %s: %w: %s cannot hold encrypted directories", dev, fs.ErrUnsupported, fstype)
		}
		d, err := h.blockDevice(dev)
		switch {
		case err != nil:
			return err
		case d.ReadOnly:
			return fmt.Errorf("mkfs %s: %w", dev, unix.EROFS)
		case h.fsMounted(d.Device):
			return fmt.Errorf("mkfs %s: mounted: %w", dev, unix.EBUSY)
		}
		h.fs[d.BackingFile] = &filesystem{Type: fstype, Size: d.SizeBytes, Encrypt: o.Encrypt}
		return nil
	})
}

// Size implements hostos.FSTools.
func (h *Host) Size(dev, fstype string) (int64, error) {
	return call(h, "Size", "fs-size", []any{dev, fstype}, func() (int64, error) {
		d, err := h.blockDevice(dev)
		if err != nil {
			return 0, err
		}
		f := h.fs[d.BackingFile]
		if f == nil || f.Type != fstype {
			return 0, fmt.Errorf("%s: %w", dev, fs.ErrNoSuperblock)
		}
		return f.Size, nil
	})
}

// Grow implements hostos.FSTools: the filesystem, mounted at mountPoint
// (the root of a read-write mount of it), takes the device's size.
func (h *Host) Grow(ctx context.Context, dev, mountPoint, fstype string) error {
	return h.do("Grow", "grow", []any{dev, mountPoint, fstype}, func() error {
		d, err := h.blockDevice(dev)
		if err != nil {
			return err
		}
		m, err := h.fsRoot(mountPoint)
		switch {
		case err != nil:
			return err
		case m.Source != d.Path && (m.Major != d.Major || m.Minor != d.Minor):
			return fmt.Errorf("grow %s at %s: a mount of %s: %w", dev, mountPoint, m.Source, unix.EINVAL)
		case m.ReadOnly():
			return fmt.Errorf("grow %s at %s: %w", dev, mountPoint, unix.EROFS)
		}
		f := h.fs[d.BackingFile]
		if f == nil || f.Type != fstype {
			return fmt.Errorf("%s: %w", dev, fs.ErrNoSuperblock)
		}
		f.Size = d.SizeBytes
		return nil
	})
}

// GrowOffline implements hostos.FSTools: only an unmounted filesystem.
func (h *Host) GrowOffline(ctx context.Context, dev, fstype string, repair bool) error {
	return h.do("GrowOffline", "grow-offline", []any{dev, fstype, fmt.Sprintf("repair=%v", repair)}, func() error {
		d, err := h.blockDevice(dev)
		switch {
		case err != nil:
			return err
		case h.fsMounted(d.Device):
			return fmt.Errorf("resize2fs %s: %w", dev, fs.ErrInUse)
		}
		f := h.fs[d.BackingFile]
		if f == nil || f.Type != fstype {
			return fmt.Errorf("%s: %w", dev, fs.ErrNoSuperblock)
		}
		f.Size = d.SizeBytes
		return nil
	})
}

// StatFS implements hostos.FSTools for the filesystem holding path: what
// SetStats set, else an empty filesystem of its size (btrfs with no inode
// counts, as the kernel reports it).
func (h *Host) StatFS(path string) (fs.Stats, error) {
	return call(h, "StatFS", "statfs", []any{path}, func() (fs.Stats, error) {
		m := h.holder(resolve(path))
		for _, d := range h.devices {
			if m.Source == d.Path || (m.FSType != "devtmpfs" && m.Major == d.Major && m.Minor == d.Minor) {
				if st, ok := h.stats[d.BackingFile]; ok {
					return st, nil
				}
				st := fs.Stats{}
				if f := h.fs[d.BackingFile]; f != nil {
					st.TotalBytes, st.AvailableBytes = f.Size, f.Size
					if f.Type != "btrfs" {
						st.TotalInodes, st.FreeInodes = f.Size/16384, f.Size/16384
					}
				}
				return st, nil
			}
		}
		return fs.Stats{}, nil
	})
}

// BlockDeviceSize implements hostos.FSTools.
func (h *Host) BlockDeviceSize(dev string) (int64, error) {
	return call(h, "BlockDeviceSize", "blockdev-size", []any{dev}, func() (int64, error) {
		d, err := h.blockDevice(dev)
		if err != nil {
			return 0, err
		}
		return d.SizeBytes, nil
	})
}

// fsRoot returns the mount at mountPoint when it is the root of a mount,
// as the freeze and grow tools demand.
func (h *Host) fsRoot(mountPoint string) (mount.Info, error) {
	m, ok := h.table.Top(resolve(mountPoint))
	if !ok || m.FSType == "devtmpfs" {
		return mount.Info{}, fmt.Errorf("%s: %w", mountPoint, fs.ErrNotMountPoint)
	}
	return m, nil
}

func sbKey(m mount.Info) string { return fmt.Sprintf("%d:%d", m.Major, m.Minor) }

// Freeze implements hostos.FSTools: EBUSY when already frozen, as FIFREEZE.
func (h *Host) Freeze(mountPoint string) error {
	return h.do("Freeze", "freeze", []any{mountPoint}, func() error {
		m, err := h.fsRoot(mountPoint)
		if err != nil {
			return err
		}
		if h.frozen[sbKey(m)] {
			return fmt.Errorf("freeze %s: %w", mountPoint, unix.EBUSY)
		}
		h.frozen[sbKey(m)] = true
		return nil
	})
}

// Thaw implements hostos.FSTools; a filesystem not frozen is no error.
func (h *Host) Thaw(mountPoint string) error {
	return h.do("Thaw", "thaw", []any{mountPoint}, func() error {
		m, err := h.fsRoot(mountPoint)
		if err != nil {
			return err
		}
		delete(h.frozen, sbKey(m))
		return nil
	})
}

// Frozen reports whether the filesystem mounted at mountPoint is frozen.
func (h *Host) Frozen(mountPoint string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, err := h.fsRoot(mountPoint)
	return err == nil && h.frozen[sbKey(m)]
}
