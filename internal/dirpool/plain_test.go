package dirpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// plainFilesystems are the filesystems this kernel mounts without a quota
// filevol can enforce (no XFS quota support, ext4 without QFMT_V2).
var plainFilesystems = []string{"ext4", "xfs"}

// On a pool without a usable quota a create is refused by default,
// FAILED_PRECONDITION's sentinel, with a message that says why and names
// the parameter; with allowUnenforcedSize: "true" the volume is made, its
// owner and mode applied, and its context, its size note and its usage
// all say that the size is not enforced (a write past it succeeds).
// Snapshots and clones are refused.
func TestPlainPoolRefusesOrSaysUnenforced(t *testing.T) {
	for _, fstype := range plainFilesystems {
		t.Run(fstype, func(t *testing.T) {
			dir := dirpooltest.Filesystem(t, testutil.Scratch(t, "dirpool-"+fstype), 512<<20, fstype)
			p := openPool(t, dir)
			ctx := context.Background()
			_, err := p.Create(ctx, volume.CreateRequest{Name: "refused", CapacityBytes: 8 * mib})
			if !errors.Is(err, ErrNoQuota) || !strings.Contains(err.Error(), ParamAllowUnenforcedSize) || !strings.Contains(err.Error(), fstype) {
				t.Fatalf("create on %s without %s: %v, want ErrNoQuota naming the parameter and the filesystem", fstype, ParamAllowUnenforcedSize, err)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, metaDir, tmpDir)); len(ents) != 0 || len(p.List()) != 0 {
				t.Fatalf("the refused create left %v, %v", ents, p.List())
			}
			params := map[string]string{ParamAllowUnenforcedSize: "true", ParamUID: "1001", ParamGID: "2002", ParamDirectoryPerms: "2770"}
			v := create(t, p, "unenforced", 8*mib, params)
			if !v.Unenforced || v.Inode == 0 || v.Subvolume != 0 {
				t.Fatalf("record %+v", v)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(dir, v.Path), &st); err != nil || st.Uid != 1001 || st.Gid != 2002 || st.Mode&0o7777 != 0o2770 {
				t.Errorf("directory %d:%d %o (%v), want 1001:2002 2770", st.Uid, st.Gid, st.Mode&0o7777, err)
			}
			got, err := p.Get(v.ID)
			if err != nil || got.Context[ContextSizeEnforced] != "false" || !strings.Contains(got.Context[ContextSizeNote], "NOT enforced") {
				t.Errorf("volume context %v (%v), want size-enforced=false and a note", got.Context, err)
			}
			if note := p.SizeNote(v.ID); !strings.Contains(note, "NOT enforced") || !strings.Contains(note, ParamAllowUnenforcedSize) {
				t.Errorf("size note %q", note)
			}
			if n, err := writeFile(filepath.Join(dir, v.Path, "big"), 24*mib); err != nil {
				t.Errorf("wrote %d of 24 MiB into an 8 MiB unenforced volume: %v (nothing should limit it but the filesystem)", n, err)
			}
			used, total, err := p.Usage(v.ID)
			if err != nil || total < 256<<20 || used < 24*mib {
				t.Errorf("usage %d of %d (%v), want the filesystem's", used, total, err)
			}
			if e, err := p.Expand(ctx, v.ID, 16*mib, 0); err != nil || e.CapacityBytes != 16*mib {
				t.Errorf("expand: %v, %v", e, err)
			}
			if _, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "s", SourceVolumeID: v.ID}); !errors.Is(err, ErrNoSnapshots) {
				t.Errorf("snapshot on %s: %v, want ErrNoSnapshots", fstype, err)
			}
			_, err = p.Create(ctx, volume.CreateRequest{Name: "clone", CapacityBytes: 8 * mib, Parameters: params,
				Source: &volume.ContentSource{Kind: volume.SourceVolume, ID: v.ID}})
			if !errors.Is(err, ErrNoSnapshots) {
				t.Errorf("clone on %s: %v, want ErrNoSnapshots", fstype, err)
			}
			if err := p.Delete(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
			if err := p.EmptyTrash(); err != nil {
				t.Fatal(err)
			}
			assertTrashEmpty(t, dir)
			// deleteDirectory: "false" keeps a plain volume's directory too.
			kept := create(t, p, "kept", 8*mib, with(params, ParamDeleteDirectory, "false"))
			must(t, os.WriteFile(filepath.Join(dir, kept.Path, "data"), []byte("kept"), 0o644))
			if err := p.Delete(ctx, kept.ID); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, kept.Path, "data")); err != nil || string(b) != "kept" || p.Known(kept.ID) {
				t.Errorf("retained plain directory: %q, %v; record kept: %t", b, err, p.Known(kept.ID))
			}
		})
	}
}

// A plain pool's delete removes exactly the volume's tree: a symlink to
// another volume is removed, not followed; a hard link to another
// volume's file leaves that file whole; a tree deeper than removeTree
// holds open goes too; a mount inside the volume is never descended (the
// delete reports it and finishes once it is gone); a directory that
// replaced the volume is refused.
func TestPlainPoolDeleteRemovesOnlyTheVolume(t *testing.T) {
	for _, fstype := range plainFilesystems {
		t.Run(fstype, func(t *testing.T) {
			dir := dirpooltest.Filesystem(t, testutil.Scratch(t, "dirpool-"+fstype), 512<<20, fstype)
			p := openPool(t, dir)
			ctx := context.Background()
			params := map[string]string{ParamAllowUnenforcedSize: "true"}
			victim, other := create(t, p, "victim", 8*mib, params), create(t, p, "other", 8*mib, params)
			vdir, odir := filepath.Join(dir, victim.Path), filepath.Join(dir, other.Path)
			if err := os.WriteFile(filepath.Join(odir, "keep"), []byte("other's data"), 0o644); err != nil {
				t.Fatal(err)
			}
			must(t, os.Symlink(odir, filepath.Join(vdir, "to-other")))
			must(t, os.Symlink("/", filepath.Join(vdir, "to-root")))
			must(t, os.Link(filepath.Join(odir, "keep"), filepath.Join(vdir, "hardlink")))
			deep := vdir
			for range maxRemoveDepth * 2 {
				deep = filepath.Join(deep, "d")
			}
			must(t, os.MkdirAll(deep, 0o755))
			must(t, os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o644))
			outside := t.TempDir()
			must(t, os.WriteFile(filepath.Join(outside, "precious"), []byte("not the volume's"), 0o644))
			bindAt := filepath.Join(vdir, "mnt")
			must(t, os.Mkdir(bindAt, 0o755))
			must(t, mount.Bind(outside, bindAt, false, nil))
			t.Cleanup(func() { _ = mount.UnmountAll(bindAt) })

			if err := p.Delete(ctx, victim.ID); err != nil {
				t.Fatal(err)
			}
			if err := p.EmptyTrash(); err == nil {
				t.Error("the trash held a mount point and emptying it reported nothing")
			}
			table, err := mount.Read()
			must(t, err)
			for _, m := range table.Under(filepath.Join(dir, metaDir)) { // trash or destroying
				must(t, mount.UnmountAll(m.MountPoint))
			}
			if err := p.EmptyTrash(); err != nil {
				t.Fatal(err)
			}
			assertTrashEmpty(t, dir)
			if b, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(b) != "not the volume's" {
				t.Errorf("the bind mount's source: %q, %v", b, err)
			}
			if b, err := os.ReadFile(filepath.Join(odir, "keep")); err != nil || string(b) != "other's data" {
				t.Errorf("the other volume's file: %q, %v", b, err)
			}
			if _, err := os.Stat("/etc/hostname"); err != nil && !os.IsNotExist(err) {
				t.Error(err)
			}

			// The pod (or anyone) replaces the other volume's directory.
			must(t, os.Rename(odir, odir+".moved"))
			must(t, os.Mkdir(odir, 0o755))
			if err := p.Delete(ctx, other.ID); !errors.Is(err, ErrNotVolume) {
				t.Errorf("delete of a replaced directory: %v, want ErrNotVolume", err)
			}
			if _, err := os.Stat(odir + ".moved/keep"); err != nil {
				t.Error(err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func assertTrashEmpty(t *testing.T, dir string) {
	t.Helper()
	for _, sub := range []string{trashDir, destroyingDir} {
		if ents, _ := os.ReadDir(filepath.Join(dir, metaDir, sub)); len(ents) != 0 {
			t.Errorf("left in %s: %d entries", sub, len(ents))
		}
	}
}

// A plain pool removes a tree whose directories hold more entries than
// one batch of the listing (removeEntries), with a subdirectory between
// the batches and a few entries beyond the last: everything goes, the
// volume beside it stays.
func TestPlainPoolRemovesDirectoriesLargerThanABatch(t *testing.T) {
	dir := dirpooltest.Filesystem(t, testutil.Scratch(t, "dirpool-ext4"), 512<<20, "ext4")
	p := openPool(t, dir)
	p.stopCollector()
	params := map[string]string{ParamAllowUnenforcedSize: "true"}
	victim, other := create(t, p, "victim", 8*mib, params), create(t, p, "other", 8*mib, params)
	fill := func(d string, n int) {
		must(t, os.MkdirAll(d, 0o755))
		for i := range n {
			must(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), nil, 0o644))
		}
	}
	root := filepath.Join(dir, victim.Path)
	fill(root, 2*removeBatch+7)
	fill(filepath.Join(root, "sub"), removeBatch+1)
	fill(filepath.Join(root, "sub", "deeper"), 3)
	must(t, os.WriteFile(filepath.Join(dir, other.Path, "keep"), []byte("other's"), 0o644))
	if err := p.Delete(context.Background(), victim.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	assertTrashEmpty(t, dir)
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the deleted volume's directory: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, other.Path, "keep")); err != nil || string(b) != "other's" {
		t.Errorf("the other volume's file: %q, %v", b, err)
	}
}

// TestPlainPoolSaysSizesAreNotEnforced: a pool without quota names itself
// so for doctor and logs, not as a btrfs pool.
func TestPlainPoolSaysSizesAreNotEnforced(t *testing.T) {
	p, err := Open(t.TempDir(), Options{NodeID: "n1"})
	if err != nil {
		t.Skipf("open a pool on the temporary directory: %v", err)
	}
	defer p.Close()
	if _, ok := p.quota.(*noQuota); !ok {
		t.Skip("the temporary directory is on a filesystem with quotas")
	}
	if m := p.QuotaMode(); !strings.HasPrefix(m, "none: volume sizes are not enforced") || strings.Contains(m, "btrfs") {
		t.Errorf("QuotaMode() = %q", m)
	}
}
