package volview

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// TestTableIndexAgreesWithScan checks the index against the linear
// functions it replaces, on tables that mix every kind of mount they tell
// apart: filesystems by device number, btrfs by source only, device node
// binds, stacked mounts at one path, and devices that share a number with
// no mount. Seeded, so a failure reproduces.
func TestTableIndexAgreesWithScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	devs := make([]loop.Device, 12)
	for i := range devs {
		devs[i] = loop.Device{Path: fmt.Sprintf("/dev/loop%d", i), Number: i, Major: 7, Minor: uint32(i)}
	}
	for round := range 200 {
		var table mount.Table
		for k := range r.IntN(40) {
			n := r.IntN(len(devs) + 2) // two numbers no device has
			m := mount.Info{ID: k + 100, ParentID: 1, Root: "/", MountPoint: fmt.Sprintf("/m/%d", r.IntN(8)), FSType: "ext4",
				Major: 7, Minor: uint32(n), Source: fmt.Sprintf("/dev/loop%d", n)}
			switch r.IntN(4) {
			case 0: // a device node bind
				m.FSType, m.Major, m.Minor, m.Source, m.Root = "devtmpfs", 0, 5, "udev", fmt.Sprintf("/loop%d", n)
			case 1: // btrfs: an anonymous device number, the source names the device
				m.FSType, m.Major, m.Minor = "btrfs", 0, uint32(40+r.IntN(3))
			case 2: // a bind of a directory inside the filesystem
				m.Root = "/sub"
			}
			table = append(table, m)
		}
		x := IndexTable(table)
		for _, d := range devs {
			if got, want := x.Used(d), Used(table, d); got != want {
				t.Fatalf("round %d: Used(%s) = %v, the scan says %v\n%v", round, d.Path, got, want, table)
			}
		}
		pick := []loop.Device{devs[r.IntN(len(devs))], devs[r.IntN(len(devs))]}
		if got, want := x.Of(pick), Of(pick, table); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: Of(%v) =\n%v\nthe scan says\n%v", round, pick, got, want)
		}
		if !reflect.DeepEqual(x.Table(), table) {
			t.Fatalf("round %d: Table() is not the table indexed", round)
		}
	}
}

// TestTableIndexOrder: uses come in table order, whichever key found them,
// as Of's callers read the first filesystem mount as the staging path.
func TestTableIndexOrder(t *testing.T) {
	table := mount.Table{
		{ID: 1, Major: 0, Minor: 5, Root: "/loop3", MountPoint: "/t1", FSType: "devtmpfs", Source: "udev"},
		{ID: 2, Major: 0, Minor: 47, Root: "/", MountPoint: "/b", FSType: "btrfs", Source: "/dev/loop3"},
		{ID: 3, Major: 7, Minor: 3, Root: "/", MountPoint: "/s", FSType: "ext4", Source: "/dev/loop3"},
	}
	u := IndexTable(table).Of([]loop.Device{loop3})
	var got []string
	for _, x := range u.Uses {
		got = append(got, x.MountPoint)
	}
	if want := []string{"/t1", "/b", "/s"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("uses %v, want %v", got, want)
	}
}
