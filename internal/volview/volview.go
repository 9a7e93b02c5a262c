// Package volview is the one reader of what the kernel shows of filevol's
// volumes. From the loop devices and the mount table it says, for an
// image, which devices it backs, where their filesystems are mounted and
// where the device nodes are bound (block volumes); which of those places
// is the staging path and which are targets. The CSI services, the
// image kind's node half, its garbage collector and
// the node view ask it instead of each comparing device numbers, devtmpfs
// roots and path names on its own.
//
// It reads snapshots the caller passes (a device list, a mount table);
// it never touches the kernel itself, so it is tested with plain values.
package volview

import (
	"path/filepath"
	"regexp"
	"strings"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// StagedDeviceName is the file inside a block volume's staging directory
// onto which NodeStageVolume binds the loop device node. The bind is the
// staged state as the kernel shows it: mountinfo tells a staged block
// device from a leaked one, after a restart as after a crash.
const StagedDeviceName = "device"

// StagedDevicePath is where a block volume staged at staging has its device.
func StagedDevicePath(staging string) string { return filepath.Join(staging, StagedDeviceName) }

// IsDeviceBind reports whether m is a bind mount of a device node (a block
// volume's staging or target file) rather than a mount of a filesystem: the
// kernel shows such a bind as a mount of devtmpfs whose root is the node's
// name under /dev.
func IsDeviceBind(m mount.Info) bool { return m.FSType == "devtmpfs" }

// BoundDeviceName is the /dev name (loop3) of the device node a device
// bind shows.
func BoundDeviceName(m mount.Info) string { return strings.TrimPrefix(m.Root, "/") }

// Binds reports whether m is a bind of d's device node.
func Binds(m mount.Info, d loop.Device) bool {
	return IsDeviceBind(m) && m.Root == "/"+filepath.Base(d.Path)
}

// Mounts reports whether m is a mount of the filesystem on d (a bind of it
// included). Most filesystems show the device's major:minor in mountinfo;
// btrfs shows an anonymous device number, so the mount source is compared
// as well.
func Mounts(m mount.Info, d loop.Device) bool {
	return !IsDeviceBind(m) && ((m.Major == d.Major && m.Minor == d.Minor) || m.Source == d.Path)
}

// DeviceOf returns the device among devs that m mounts the filesystem of,
// or binds the node of.
func DeviceOf(devs []loop.Device, m mount.Info) (loop.Device, bool) {
	for _, d := range devs {
		if Mounts(m, d) || Binds(m, d) {
			return d, true
		}
	}
	return loop.Device{}, false
}

// MountsOf returns every mount of the filesystem on d, bind mounts included.
func MountsOf(table mount.Table, d loop.Device) []mount.Info { return where(table, d, Mounts) }

// BindsOf returns the binds of d's device node.
func BindsOf(table mount.Table, d loop.Device) []mount.Info { return where(table, d, Binds) }

// where returns the mounts m of table for which is(m, d) holds, in
// table's order; nil when none does.
func where(table mount.Table, d loop.Device, is func(mount.Info, loop.Device) bool) []mount.Info {
	var out []mount.Info
	for _, m := range table {
		if is(m, d) {
			out = append(out, m)
		}
	}
	return out
}

// Used reports whether anything mounts d's filesystem or binds its node.
func Used(table mount.Table, d loop.Device) bool {
	for _, m := range table {
		if Mounts(m, d) || Binds(m, d) {
			return true
		}
	}
	return false
}

// Use is one place where a volume is in use: a mount of a device's
// filesystem, or a bind of its node (Bind).
type Use struct {
	mount.Info
	Device loop.Device
	Bind   bool
}

// Usage is what the kernel shows of one volume: the loop devices backed by
// its image and every use of them, device by device, each in mount table
// order.
type Usage struct {
	Devices []loop.Device
	Uses    []Use
}

// Of gathers the uses of one image's devices from table.
func Of(devs []loop.Device, table mount.Table) Usage {
	u := Usage{Devices: devs}
	for _, d := range devs {
		for _, m := range table {
			if Mounts(m, d) || Binds(m, d) {
				u.Uses = append(u.Uses, Use{Info: m, Device: d, Bind: IsDeviceBind(m)})
			}
		}
	}
	return u
}

// Attached reports whether any device is backed by the image.
func (u Usage) Attached() bool { return len(u.Devices) > 0 }

// FS returns the mounts of the devices' filesystems.
func (u Usage) FS() []Use { return u.filter(false) }

// Binds returns the binds of the device nodes.
func (u Usage) Binds() []Use { return u.filter(true) }

func (u Usage) filter(bind bool) []Use {
	var out []Use
	for _, x := range u.Uses {
		if x.Bind == bind {
			out = append(out, x)
		}
	}
	return out
}

// String says where the volume is in use, for FAILED_PRECONDITION messages.
func (u Usage) String() string {
	var devs, places []string
	for _, d := range u.Devices {
		devs = append(devs, d.Path)
	}
	for _, x := range u.FS() {
		places = append(places, x.MountPoint)
	}
	for _, x := range u.Binds() {
		places = append(places, x.MountPoint)
	}
	s := "attached to " + strings.Join(devs, ", ")
	if len(places) > 0 {
		s += ", mounted at " + strings.Join(places, ", ")
	}
	return s
}

// Roles splits the uses into the staging path and the targets, for a view
// that was not told the paths (the CSI calls are: they never ask this).
// The rules, in order:
//   - a use inside a pod's directory (PodUID) is a target;
//   - a device bind is staging when it is at StagedDeviceName, where only
//     NodeStageVolume binds (kubelet names block targets by pod UID);
//     any other bind is a target;
//   - a filesystem mount at kubelet's staging directory (…/globalmount) is
//     staging, and so is the first one in mount table order when none was
//     found before it: NodeStageVolume mounts the filesystem, publishes
//     bind that mount afterwards.
func (u Usage) Roles() (staging, targets []Use) {
	for _, x := range u.Uses {
		switch {
		case PodUID(x.MountPoint) != "":
			targets = append(targets, x)
		case x.Bind:
			if filepath.Base(x.MountPoint) == StagedDeviceName {
				staging = append(staging, x)
			} else {
				targets = append(targets, x)
			}
		case len(staging) == 0 || filepath.Base(x.MountPoint) == "globalmount":
			staging = append(staging, x)
		default:
			targets = append(targets, x)
		}
	}
	return staging, targets
}

var (
	// kubelet's layout: .../pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount
	// and, for block volumes, .../volumeDevices/publish/<pv>/<uid>.
	podVolumePath = regexp.MustCompile(`/pods/([0-9a-fA-F-]{36})/volume`)
	podBlockPath  = regexp.MustCompile(`/volumeDevices/publish/[^/]+/([0-9a-fA-F-]{36})$`)
)

// PodUID returns the UID of the pod whose volume directory holds p, by
// kubelet's layout; "" when p is not in one.
func PodUID(p string) string {
	if m := podVolumePath.FindStringSubmatch(p); m != nil {
		return m[1]
	}
	if m := podBlockPath.FindStringSubmatch(p); m != nil {
		return m[1]
	}
	return ""
}
