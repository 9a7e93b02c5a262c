package mount

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLookupAgreesWithTheTable: for every kind of mount a volume makes
// (a filesystem on a loop device, ext4 and btrfs; a read-only bind of it; a
// bind of a device node onto a file), and for a bind whose superblock the
// kernel made read-only while the bind itself stays read-write, Lookup
// describes the top mount as /proc/self/mountinfo does. A path inside a
// mount and a missing path are not mount points.
func TestLookupAgreesWithTheTable(t *testing.T) {
	if _, _, err := Lookup("/"); err != nil {
		t.Skipf("statmount: %v", err)
	}
	dir := scratch(t)
	ext4 := newDevice(t, mkdir(t, filepath.Join(dir, "e")), "mkfs.ext4")
	btrfs := newDevice(t, mkdir(t, filepath.Join(dir, "b")), "mkfs.btrfs")
	stage := mkdir(t, filepath.Join(dir, "stage"))
	roBind := mkdir(t, filepath.Join(dir, "ro-bind"))
	rwBind := mkdir(t, filepath.Join(dir, "rw-bind"))
	bstage := mkdir(t, filepath.Join(dir, "bstage"))
	block := filepath.Join(dir, "block")
	if err := os.WriteFile(block, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range []string{block, bstage, rwBind, roBind, stage} {
			if err := UnmountAll(p); err != nil {
				t.Errorf("unmount %s: %v", p, err)
			}
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(Mount(ext4.Path, stage, "ext4", []string{"nosuid"}))
	must(Bind(stage, roBind, true, nil))
	must(Bind(stage, rwBind, false, nil))
	must(Mount(btrfs.Path, bstage, "btrfs", nil))
	must(Bind(btrfs.Path, block, false, nil))
	sub := mkdir(t, filepath.Join(stage, "sub"))

	check := func(path string, wantRO, wantSuperRO bool) {
		t.Helper()
		got, ok, err := Lookup(path)
		if err != nil || !ok {
			t.Fatalf("Lookup(%s) = %v, %v", path, ok, err)
		}
		want := mounted(t, path)
		if got.ID != want.ID || got.ParentID != want.ParentID || got.Major != want.Major || got.Minor != want.Minor ||
			got.Root != want.Root || got.MountPoint != want.MountPoint || got.FSType != want.FSType {
			t.Errorf("Lookup(%s) = %+v\nthe table says %+v", path, got, want)
		}
		if got.Source != "" && got.Source != want.Source {
			t.Errorf("Lookup(%s).Source = %q, the table says %q", path, got.Source, want.Source)
		}
		if ro, superRO := has(got.Options, "ro"), has(got.SuperOptions, "ro"); ro != wantRO || superRO != wantSuperRO {
			t.Errorf("Lookup(%s): mount ro %v, superblock ro %v; want %v, %v", path, ro, superRO, wantRO, wantSuperRO)
		}
		if has(want.Options, "ro") != wantRO || has(want.SuperOptions, "ro") != wantSuperRO {
			t.Errorf("the table at %s: %v / %v; the test expected ro %v, superblock ro %v", path, want.Options, want.SuperOptions, wantRO, wantSuperRO)
		}
	}
	check(stage, false, false)
	check(roBind, true, false)
	check(bstage, false, false)
	check(block, false, false)
	if m, _, _ := Lookup(block); m.Root != "/"+filepath.Base(btrfs.Path) {
		t.Errorf("device bind root = %q, want /%s", m.Root, filepath.Base(btrfs.Path))
	}

	// What the kernel does on errors=remount-ro: the superblock becomes
	// read-only under every mount of it; a remount of one mount without
	// MS_BIND changes the superblock, and the other binds stay rw.
	must(Mount(ext4.Path, stage, "ext4", []string{"remount", "ro"}))
	check(rwBind, false, true)

	for _, p := range []string{sub, filepath.Join(dir, "missing"), filepath.Join(dir, "missing", "deeper")} {
		if m, ok, err := Lookup(p); ok || err != nil {
			t.Errorf("Lookup(%s) = %+v, %v, %v; want not a mount point", p, m, ok, err)
		}
	}
}
