package imagenode

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/reading"
	"github.com/filevol/filevol/internal/volview"
)

// read returns the reading an answer of b's is made from: the caller's
// (reading.With), or a shared one (reading.Shared); a backend built
// without sharing reads the kernel itself.
func (b *Node) read(ctx context.Context) (*reading.Reading, error) {
	if r, ok := reading.From(ctx); ok {
		return r, nil
	}
	if b.readings == nil {
		return reading.Read(b.host)
	}
	return b.readings.Get(ctx)
}

// readAt returns the reading an answer about one volume is made from when
// the caller names the paths the volume is mounted at (stats always do;
// health does when kubelet has them): the top mount at each path
// (Mounter.Lookup, statx and statmount) and the loop devices those mounts
// are of, each read alone when asked for. Its cost does not grow with the
// node's volumes. A whole reading (read) passes over every loop device and
// parses the whole mount table: with 1,000 volumes, the 1,000 health
// questions after a restart took 12 s and more that way, on 2 CPUs.
//
// What it does not see is a device of the volume mounted at none of the
// paths (a second device, leaked): a question with no paths still gets the
// whole reading. A kernel without statmount (before 6.8), and a mount whose
// device its numbers cannot name (btrfs before 6.14, which has no source
// in statmount), get the whole reading too. A reading the caller carries
// (reading.With) is used as it is.
func (b *Node) readAt(ctx context.Context, paths ...string) (*reading.Reading, error) {
	if r, ok := reading.From(ctx); ok {
		return r, nil
	}
	var table mount.Table
	var names []string
	asked := false
	for _, p := range paths {
		if p == "" {
			continue
		}
		asked = true
		m, ok, err := b.host.Mounts.Lookup(p)
		if errors.Is(err, errors.ErrUnsupported) {
			return b.read(ctx)
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		name, known := mountedDevice(b.host.Loops, m)
		if !known {
			return b.read(ctx)
		}
		table = append(table, m)
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if !asked {
		return b.read(ctx)
	}
	return reading.New(namedLoops{loops: b.host.Loops, names: names}, table), nil
}

// mountedDevice names the loop device m is a mount of, or binds the node
// of: "" when it is no loop device's; known is false when m's numbers do
// not say (an anonymous device number and no source).
func mountedDevice(loops hostos.Loops, m mount.Info) (name string, known bool) {
	if volview.IsDeviceBind(m) {
		if n := volview.BoundDeviceName(m); strings.HasPrefix(n, "loop") {
			return n, true
		}
		return "", true
	}
	if m.Source != "" {
		if n, ok := strings.CutPrefix(m.Source, "/dev/"); ok && strings.HasPrefix(n, "loop") {
			return n, true
		}
		return "", true
	}
	return loops.NameOf(m.Major, m.Minor)
}

// namedLoops finds a file's devices among the named ones only, reading
// each when asked (Loops.Get): a device detached or given to another file
// since the mount was looked up is not returned.
type namedLoops struct {
	loops hostos.Loops
	names []string
}

func (n namedLoops) Find(path string) ([]loop.Device, error) {
	var out []loop.Device
	for _, name := range n.names {
		d, ok, err := n.loops.Get(name, path)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// topMount is the top mount at path, asked of that path alone
// (Mounter.Lookup); on a kernel without statmount, from the whole table.
// Its Options and SuperOptions say only ro or rw.
func topMount(h hostos.Host, path string) (mount.Info, bool, error) {
	m, ok, err := h.Mounts.Lookup(path)
	if !errors.Is(err, errors.ErrUnsupported) {
		return m, ok, err
	}
	table, err := h.Mounts.Table()
	if err != nil {
		return mount.Info{}, false, err
	}
	m, ok = table.Top(path)
	return m, ok, nil
}

// deviceOf returns the image's loop device that m mounts or binds,
// reading that device alone (Loops.Get); all the image's devices only
// when m's numbers do not name one.
func (b *Node) deviceOf(m mount.Info, image string) (loop.Device, bool, error) {
	name, known := mountedDevice(b.host.Loops, m)
	if !known {
		devs, err := b.host.Loops.Find(image)
		if err != nil {
			return loop.Device{}, false, err
		}
		d, ok := volview.DeviceOf(devs, m)
		return d, ok, nil
	}
	if name == "" {
		return loop.Device{}, false, nil
	}
	d, ok, err := b.host.Loops.Get(name, image)
	if err != nil || !ok {
		return loop.Device{}, false, err
	}
	_, ok = volview.DeviceOf([]loop.Device{d}, m)
	return d, ok, nil
}
