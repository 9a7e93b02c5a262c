package fake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
)

// Find implements hostos.Loops.
func (h *Host) Find(backingFile string) ([]loop.Device, error) {
	return call(h, "Find", "find", []any{backingFile}, func() ([]loop.Device, error) {
		return h.find(resolve(backingFile)), nil
	})
}

func (h *Host) find(backing string) []loop.Device {
	var out []loop.Device
	for _, d := range h.sorted() {
		if d.BackingFile == backing {
			out = append(out, d)
		}
	}
	return out
}

// Index implements hostos.Loops. The fake keeps its devices in memory, so
// a pass over them costs nothing: the index answers each Find from the
// host as it is then, with the faults a test injected into Find and the
// same operation log as a Find.
func (h *Host) Index() (hostos.LoopIndex, error) { return liveIndex{h}, nil }

type liveIndex struct{ h *Host }

func (x liveIndex) Find(backingFile string) ([]loop.Device, error) { return x.h.Find(backingFile) }

// List implements hostos.Loops.
func (h *Host) List() ([]loop.Device, error) {
	return call(h, "List", "list", nil, func() ([]loop.Device, error) {
		return h.sorted(), nil
	})
}

// sorted returns the devices in number order as sysfs would show them now.
func (h *Host) sorted() []loop.Device {
	h.settle()
	var out []loop.Device
	for _, d := range h.devices {
		x := d.Device
		if _, err := os.Stat(x.BackingFile); errors.Is(err, os.ErrNotExist) {
			x.Deleted = true
		}
		out = append(out, x)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Number < out[b].Number })
	return out
}

// Attach implements hostos.Loops: the lowest free /dev/loopN.
func (h *Host) Attach(ctx context.Context, backingFile string, opts loop.Options) (loop.Device, error) {
	return call(h, "Attach", "attach", []any{backingFile, fmt.Sprintf("ro=%v", opts.ReadOnly)}, func() (loop.Device, error) {
		if err := ctx.Err(); err != nil {
			return loop.Device{}, err
		}
		st, err := os.Stat(backingFile)
		if err != nil {
			return loop.Device{}, fmt.Errorf("open %s: %w", backingFile, err)
		}
		n := 0
		for h.devices[n] != nil {
			n++
		}
		d := loop.Device{Path: fmt.Sprintf("/dev/loop%d", n), Number: n, BackingFile: resolve(backingFile),
			ReadOnly: opts.ReadOnly, DirectIO: opts.DirectIO, SizeBytes: st.Size(), Major: loopMajor, Minor: uint32(n)}
		h.devices[n] = &device{Device: d, owner: opts.Owner, locked: opts.Lock || opts.Mark}
		h.log[len(h.log)-1] += " -> " + d.Path
		return d, nil
	})
}

// Detach implements hostos.Loops.
func (h *Host) Detach(dev string) error {
	return h.do("Detach", "detach", []any{dev}, func() error {
		return h.detach(dev)
	})
}

func (h *Host) detach(dev string) error {
	n, ok := devNumber(dev)
	if !ok {
		return fmt.Errorf("%s: %w", dev, loop.ErrNotFound)
	}
	d := h.devices[n]
	if d == nil {
		return nil // already detached
	}
	if h.fsMounted(d.Device) {
		return fmt.Errorf("detach %s: mounted: %w", dev, loop.ErrBusy)
	}
	if d.holders > 0 {
		d.Detaching = true
		return fmt.Errorf("detach %s: held open, detaches at last close: %w", dev, loop.ErrBusy)
	}
	delete(h.devices, n)
	return nil
}

// DetachFile implements hostos.Loops.
func (h *Host) DetachFile(backingFile string) error {
	return h.do("DetachFile", "detach-file", []any{backingFile}, func() error {
		var errs []error
		for _, d := range h.find(resolve(backingFile)) {
			errs = append(errs, h.detach(d.Path))
		}
		return errors.Join(errs...)
	})
}

// SetCapacity implements hostos.Loops: the device takes its file's size.
func (h *Host) SetCapacity(dev string) (int64, error) {
	return call(h, "SetCapacity", "set-capacity", []any{dev}, func() (int64, error) {
		d, err := h.device(dev)
		if err != nil {
			return 0, err
		}
		st, err := os.Stat(d.BackingFile)
		if err != nil {
			return 0, err
		}
		d.SizeBytes = st.Size()
		return d.SizeBytes, nil
	})
}

func (h *Host) device(dev string) (*device, error) {
	if n, ok := devNumber(dev); ok && h.devices[n] != nil {
		return h.devices[n], nil
	}
	return nil, fmt.Errorf("%s: %w", dev, loop.ErrNotFound)
}

// HoldOpen makes dev held by another process: Detach then only marks it
// Detaching, and it goes at Release.
func (h *Host) HoldOpen(dev string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d, err := h.device(dev); err == nil {
		d.holders++
	}
}

// Release closes a HoldOpen; the last close of a device marked Detaching
// detaches it.
func (h *Host) Release(dev string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, err := h.device(dev)
	if err != nil || d.holders == 0 {
		return
	}
	d.holders--
	h.settle()
}

// blockDevice answers for a path that must be an attached device (ENXIO
// otherwise, as opening a detached loop node does).
func (h *Host) blockDevice(dev string) (*device, error) {
	d, err := h.device(dev)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dev, unix.ENXIO)
	}
	return d, nil
}

// BackedBy implements hostos.Loops. The fake's devices have no device and
// inode numbers: a device is backed by the file its attach named, after
// the same resolution as Find.
func (h *Host) BackedBy(d loop.Device, path string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.devices[d.Number]; x != nil && (x.foreign || x.unreachable) {
		return false
	}
	return d.BackingFile == resolve(path)
}

// Locked implements hostos.Loops: as the kernel, it sees the locks of the
// devices attached with Options.Lock or Mark on this very file.
func (h *Host) Locked(backingFile string) (bool, error) {
	return call(h, "Locked", "locked", []any{backingFile}, func() (bool, error) {
		for _, d := range h.devices {
			if d.locked && !d.foreign && d.BackingFile == resolve(backingFile) {
				return true, nil
			}
		}
		return false, nil
	})
}

// Owner implements hostos.Loops.
func (h *Host) Owner(d loop.Device) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.devices[d.Number]; x != nil && !x.unreachable {
		return x.owner
	}
	return ""
}

// Named implements hostos.Loops.
func (h *Host) Named(path string) ([]loop.Device, error) {
	return call(h, "Named", "named", []any{path}, func() ([]loop.Device, error) {
		var out []loop.Device
		for _, d := range h.sorted() {
			if loop.Names(d, path) {
				out = append(out, d)
			}
		}
		return out, nil
	})
}

// Unreachable implements hostos.Loops (SetUnreachable).
func (h *Host) Unreachable(d loop.Device) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	x := h.devices[d.Number]
	return x != nil && x.unreachable
}

// DetachUnreachable implements hostos.Loops: as Detach, only while d is
// still attached to the same path and unreachable.
func (h *Host) DetachUnreachable(d loop.Device) error {
	return h.do("DetachUnreachable", "detach", []any{d.Path}, func() error {
		if x := h.devices[d.Number]; x == nil || !x.unreachable || x.BackingFile != d.BackingFile {
			return nil
		}
		return h.detach(d.Path)
	})
}

// Get implements hostos.Loops: the device named, when it is backed by the
// file.
func (h *Host) Get(name, backingFile string) (loop.Device, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin("Get", "get", name, backingFile); err != nil {
		return loop.Device{}, false, err
	}
	for _, d := range h.find(resolve(backingFile)) {
		if filepath.Base(d.Path) == filepath.Base(name) {
			return d, true, nil
		}
	}
	return loop.Device{}, false, nil
}

// NameOf implements hostos.Loops.
func (h *Host) NameOf(major, minor uint32) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.devices {
		if d.Major == major && d.Minor == minor {
			return filepath.Base(d.Path), true
		}
	}
	return "", false
}
