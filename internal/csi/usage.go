package csi

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// usage is what the kernel shows of one volume: the loop devices backed by
// its image and every mount of them.
type usage struct {
	devices []loop.Device
	mounts  []mount.Info // filesystem mounts and bind mounts of the devices' filesystems
	binds   []mount.Info // block publishes: device nodes bind-mounted onto files
}

func (u usage) inUse() bool { return len(u.devices) > 0 }

// String says where the volume is in use, for FAILED_PRECONDITION messages.
func (u usage) String() string {
	var devs, places []string
	for _, d := range u.devices {
		devs = append(devs, d.Path)
	}
	for _, m := range u.mounts {
		places = append(places, m.MountPoint)
	}
	for _, m := range u.binds {
		places = append(places, m.MountPoint)
	}
	s := "attached to " + strings.Join(devs, ", ")
	if len(places) > 0 {
		s += ", mounted at " + strings.Join(places, ", ")
	}
	return s
}

// volumeUsage asks the kernel where the image at path is in use.
func volumeUsage(h Host, imagePath string) (usage, error) {
	devs, err := h.FindLoop(imagePath)
	if err != nil {
		return usage{}, fmt.Errorf("look up loop devices of %s: %w", imagePath, err)
	}
	u := usage{devices: devs}
	if len(devs) == 0 {
		return u, nil
	}
	table, err := h.Mounts()
	if err != nil {
		return u, fmt.Errorf("read mount table: %w", err)
	}
	for _, d := range devs {
		u.mounts = append(u.mounts, mountsOf(table, d)...)
		u.binds = append(u.binds, deviceBinds(table, d)...)
	}
	return u, nil
}

// deviceBinds finds bind mounts of the device node itself (block volumes):
// mountinfo shows them as mounts of devtmpfs whose root is the node's name.
func deviceBinds(table mount.Table, d loop.Device) []mount.Info {
	var out []mount.Info
	root := "/" + filepath.Base(d.Path)
	for _, m := range table {
		if m.FSType == "devtmpfs" && m.Root == root {
			out = append(out, m)
		}
	}
	return out
}

// isMountOf reports whether m is a mount of the filesystem on d. Most
// filesystems show the device's major:minor in mountinfo; btrfs shows an
// anonymous device number, so the mount source is compared as well.
func isMountOf(m mount.Info, d loop.Device) bool {
	return (m.Major == d.Major && m.Minor == d.Minor) || m.Source == d.Path
}

// mountsOf returns every mount of the filesystem on d, bind mounts included.
func mountsOf(table mount.Table, d loop.Device) []mount.Info {
	var out []mount.Info
	for _, m := range table {
		if m.FSType != "devtmpfs" && isMountOf(m, d) {
			out = append(out, m)
		}
	}
	return out
}
