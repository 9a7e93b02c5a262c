package dirpool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// A btrfs volume's delete destroys its subvolume and nothing else,
// whatever the pod left inside it: symlinks to another volume and to "/"
// are destroyed with it, not followed; a hard link to another volume's
// file cannot be made at all (btrfs: no hard link across subvolumes); a
// bind mount inside it (an operator's, a pod cannot mount) keeps the
// subvolume in the trash, reported, until it is unmounted, and its source
// is untouched.
func TestDeleteWithHostileContents(t *testing.T) {
	p, dir := newPool(t)
	ctx := context.Background()
	victim, other := create(t, p, "victim", 16*mib, nil), create(t, p, "other", 16*mib, nil)
	vdir, odir := filepath.Join(dir, victim.Path), filepath.Join(dir, other.Path)
	must(t, os.WriteFile(filepath.Join(odir, "keep"), []byte("other's data"), 0o644))
	must(t, os.Symlink(odir, filepath.Join(vdir, "to-other")))
	must(t, os.Symlink("/", filepath.Join(vdir, "to-root")))
	if err := os.Link(filepath.Join(odir, "keep"), filepath.Join(vdir, "hardlink")); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("hard link across volumes: %v, want EXDEV", err)
	}
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "precious"), []byte("not the volume's"), 0o644))
	bindAt := filepath.Join(vdir, "mnt")
	must(t, os.Mkdir(bindAt, 0o755))
	must(t, mount.Bind(outside, bindAt, false, nil))
	t.Cleanup(func() { _ = mount.UnmountAll(bindAt) })

	p.stopCollector()
	if err := p.Delete(ctx, victim.ID); err != nil {
		t.Fatal(err)
	}
	trashErr := p.EmptyTrash()
	table, err := mount.Read()
	must(t, err)
	// In the trash, or taken from it to be destroyed.
	mounted := table.Under(filepath.Join(dir, metaDir))
	if trashErr == nil && len(mounted) > 0 {
		t.Error("the trash holds a mount and emptying it reported nothing")
	}
	for _, m := range mounted {
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
	if _, err := p.Record(other.ID); err != nil {
		t.Error(err)
	}
}
