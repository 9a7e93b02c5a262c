package ceph_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

// TestThickRefusedOnCephFS: ceph-fuse answers fallocate (mode 0) by
// setting the file's length and allocating nothing: no error, st_blocks
// as if every byte were there, yet the data pool holds at most one object
// of the 16 a 64 MiB file spans. A thick volume there would be a thin one
// whose writes can find the pool full, and GetCapacity would count it as
// backed. So filevol refuses thick provisioning on a CephFS pool, as on
// any filesystem that cannot preallocate: INVALID_ARGUMENT naming
// CephFS, nothing left; a thin volume is made, and cannot be made thick
// (ModifyVolume) either.
func TestThickRefusedOnCephFS(t *testing.T) {
	c, a, _ := twoNodes(t)
	c.WaitForRoom(t) // the thin volume's create asks statfs
	probe := filepath.Join(a, "fallocated")
	f, err := os.Create(probe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 64 * mib
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Fatalf("fallocate on ceph-fuse: %v; it used to succeed (then thick provisioning may be possible: look again)", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	objects := c.FileObjects(t, st.Ino)
	t.Logf("fallocate of %d MiB: length %d, st_blocks %d (%d bytes), %d RADOS objects of 4 MiB", size/mib, st.Size, st.Blocks, st.Blocks*512, objects)
	if st.Size != size || objects > 1 {
		t.Fatalf("fallocate of %d MiB: length %d, %d objects; ceph-fuse used to set the length and allocate at most 1 object", size/mib, st.Size, objects)
	}

	dir := filepath.Join(a, "pool")
	p, err := pool.Open(dir, pool.Options{NodeID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	_, err = p.Create(ctx, volume.CreateRequest{Name: "thick", CapacityBytes: 16 * mib, FSType: "ext4", Provisioning: volume.ProvisioningThick})
	if !errors.Is(err, volume.ErrInvalidArgument) || !strings.Contains(err.Error(), "CephFS") || !strings.Contains(err.Error(), "cannot preallocate") {
		t.Fatalf("thick create on CephFS: %v; want invalid argument, the filesystem cannot preallocate, naming CephFS", err)
	}
	t.Logf("thick create refused: %v", err)
	if vols := p.List(); len(vols) != 0 {
		t.Errorf("the refused create left volumes %v", vols)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "volumes")); len(ents) != 0 {
		for _, e := range ents {
			t.Errorf("the refused create left volumes/%s", e.Name())
		}
	}
	thin, err := p.Create(ctx, volume.CreateRequest{Name: "thin", CapacityBytes: 16 * mib, FSType: "ext4", Provisioning: volume.ProvisioningThin})
	if err != nil {
		t.Fatalf("thin create on CephFS: %v", err)
	}
	_, err = p.Modify(ctx, thin.ID, volume.Modification{Provisioning: volume.ProvisioningThick})
	if !errors.Is(err, volume.ErrInvalidArgument) || !strings.Contains(err.Error(), "CephFS") {
		t.Fatalf("thin to thick on CephFS: %v; want invalid argument naming CephFS", err)
	}
	if v, err := p.Get(thin.ID); err != nil || v.Provisioning != volume.ProvisioningThin {
		t.Fatalf("after the refused change: %+v, %v; want it thin as it was", v, err)
	}
	if err := p.Delete(ctx, thin.ID); err != nil {
		t.Fatal(err)
	}
}
