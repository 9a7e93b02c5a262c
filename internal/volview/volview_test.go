package volview

import (
	"slices"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

const podUID = "0b7e2c1a-5d4f-4c3b-9a8e-1f2d3c4b5a69"

var (
	loop3 = loop.Device{Path: "/dev/loop3", Number: 3, Major: 7, Minor: 3}
	loop4 = loop.Device{Path: "/dev/loop4", Number: 4, Major: 7, Minor: 4}
)

func TestMountsAndBinds(t *testing.T) {
	fsMount := mount.Info{Major: 7, Minor: 3, Root: "/", MountPoint: "/s", FSType: "ext4", Source: "/dev/loop3"}
	btrfs := mount.Info{Major: 0, Minor: 47, Root: "/", MountPoint: "/b", FSType: "btrfs", Source: "/dev/loop3"}
	bind := mount.Info{Major: 0, Minor: 5, Root: "/loop3", MountPoint: "/t", FSType: "devtmpfs", Source: "udev"}
	other := mount.Info{Major: 7, Minor: 4, Root: "/", MountPoint: "/o", FSType: "xfs", Source: "/dev/loop4"}
	cases := []struct {
		name          string
		m             mount.Info
		mounts, binds bool
	}{
		{"filesystem by device number", fsMount, true, false},
		{"btrfs by source (anonymous device number)", btrfs, true, false},
		{"device node bind", bind, false, true},
		{"another device's filesystem", other, false, false},
	}
	for _, c := range cases {
		if got := Mounts(c.m, loop3); got != c.mounts {
			t.Errorf("%s: Mounts = %v", c.name, got)
		}
		if got := Binds(c.m, loop3); got != c.binds {
			t.Errorf("%s: Binds = %v", c.name, got)
		}
	}
	if d, ok := DeviceOf([]loop.Device{loop4, loop3}, bind); !ok || d.Path != loop3.Path {
		t.Errorf("DeviceOf(bind) = %v, %v", d, ok)
	}
	if _, ok := DeviceOf([]loop.Device{loop4}, bind); ok {
		t.Error("a bind of loop3 taken for loop4's")
	}
	table := mount.Table{fsMount, bind, other, btrfs}
	if got := MountsOf(table, loop3); len(got) != 2 {
		t.Errorf("MountsOf = %+v", got)
	}
	if got := BindsOf(table, loop3); len(got) != 1 || got[0].MountPoint != "/t" {
		t.Errorf("BindsOf = %+v", got)
	}
	if Used(mount.Table{other}, loop3) || !Used(mount.Table{bind}, loop3) {
		t.Error("Used wrong")
	}
}

func TestRoles(t *testing.T) {
	staging := "/var/lib/kubelet/plugins/kubernetes.io/csi/filevol.csi.io/abc/globalmount"
	target := "/var/lib/kubelet/pods/" + podUID + "/volumes/kubernetes.io~csi/pv/mount"
	blockStaging := "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv/device"
	blockTarget := "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv/" + podUID
	table := mount.Table{
		{ID: 1, Major: 7, Minor: 3, Root: "/", MountPoint: "/mnt/first", FSType: "ext4", Source: "/dev/loop3"},
		{ID: 2, Major: 7, Minor: 3, Root: "/", MountPoint: target, FSType: "ext4", Source: "/dev/loop3"},
		{ID: 3, Major: 7, Minor: 3, Root: "/", MountPoint: "/mnt/second", FSType: "ext4", Source: "/dev/loop3"},
		{ID: 4, Major: 0, Minor: 5, Root: "/loop4", MountPoint: blockStaging, FSType: "devtmpfs", Source: "udev"},
		{ID: 5, Major: 0, Minor: 5, Root: "/loop4", MountPoint: blockTarget, FSType: "devtmpfs", Source: "udev"},
		{ID: 6, Major: 7, Minor: 3, Root: "/", MountPoint: staging, FSType: "ext4", Source: "/dev/loop3"},
	}
	u := Of([]loop.Device{loop3, loop4}, table)
	if !u.Attached() || len(u.FS()) != 4 || len(u.Binds()) != 2 {
		t.Fatalf("usage %+v", u)
	}
	st, tg := u.Roles()
	points := func(us []Use) []string {
		var out []string
		for _, x := range us {
			out = append(out, x.MountPoint)
		}
		return out
	}
	// The first filesystem mount and kubelet's globalmount are staging;
	// pod directories and other binds are targets.
	if want := []string{"/mnt/first", staging, blockStaging}; !slices.Equal(points(st), want) {
		t.Errorf("staging %v, want %v", points(st), want)
	}
	if want := []string{target, "/mnt/second", blockTarget}; !slices.Equal(points(tg), want) {
		t.Errorf("targets %v, want %v", points(tg), want)
	}
	if s := u.String(); !strings.Contains(s, "/dev/loop3, /dev/loop4") || !strings.Contains(s, blockTarget) {
		t.Errorf("String() = %q", s)
	}
	if PodUID(blockTarget) != podUID || PodUID(target) != podUID || PodUID(staging) != "" {
		t.Error("PodUID wrong")
	}
}
