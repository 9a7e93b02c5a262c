package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"syscall"
	"testing"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

func TestCreateGetDeleteList(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool"), Options{NodeID: "node-a"})
	req := volume.CreateRequest{Name: "pvc-1", CapacityBytes: gib, FSType: "ext4",
		Parameters: map[string]string{"fsType": "ext4"}}
	v := mustCreate(t, p, req)
	if v.ID != VolumeID("pvc-1") || v.Version != 1 || v.Node != "node-a" ||
		v.Provisioning != volume.ProvisioningThin || v.CapacityBytes != gib || v.CreatedAt.IsZero() {
		t.Errorf("Create returned %+v", v)
	}
	req.Parameters["fsType"] = "changed" // the pool must have its own copy
	for _, get := range []func() (volume.Volume, error){
		func() (volume.Volume, error) { return p.Get(v.ID) },
		func() (volume.Volume, error) { return p.GetByName("pvc-1") },
	} {
		got, err := get()
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Errorf("Get = %+v, %v; want %+v", got, err, v)
		}
	}
	// A thin blank volume gets its image at its first use (pending.go).
	if p.ImageExists(v.ID) {
		t.Error("ImageExists = true before the first use")
	}
	v, err := p.CommitImage(v)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p.ImagePath(v.ID))
	if err != nil || fi.Size() != gib {
		t.Fatalf("image: %v, %v", fi, err)
	}
	if !p.ImageExists(v.ID) {
		t.Error("ImageExists = false")
	}

	mustCreate(t, p, volume.CreateRequest{Name: "pvc-0", CapacityBytes: 1 << 20})
	list := p.List()
	if len(list) != 2 || list[0].ID > list[1].ID || !reflect.DeepEqual(list[0], v) && !reflect.DeepEqual(list[1], v) {
		t.Errorf("List = %+v", list)
	}
	list[0].Parameters = map[string]string{"x": "y"} // callers own what List returns

	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(v.ID); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if p.ImageExists(v.ID) || len(p.List()) != 1 {
		t.Errorf("after Delete: ImageExists %v, List %+v", p.ImageExists(v.ID), p.List())
	}
	// CSI spec: DeleteVolume of a missing volume MUST succeed.
	for range 2 {
		if err := p.Delete(context.Background(), v.ID); err != nil {
			t.Errorf("second Delete = %v", err)
		}
	}
	if got := ls(t, p.vdir); len(got) != 1 { // pvc-0's record: no image before its first use
		t.Errorf("volumes dir holds %v", got)
	}
}

func TestCreateDuplicate(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	v := mustCreate(t, p, volume.CreateRequest{Name: "pvc-dup", CapacityBytes: 1 << 20})
	v, err := p.CommitImage(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, prov := range []string{volume.ProvisioningThin, volume.ProvisioningThick} {
		_, err := p.Create(context.Background(), volume.CreateRequest{Name: "pvc-dup", CapacityBytes: 2 << 20, Provisioning: prov})
		if !errors.Is(err, volume.ErrAlreadyExists) {
			t.Errorf("duplicate %s Create = %v, want ErrAlreadyExists", prov, err)
		}
	}
	if got, _ := p.Get(v.ID); got.CapacityBytes != 1<<20 {
		t.Errorf("the duplicate changed the record: %+v", got)
	}
	if fi, _ := os.Stat(p.ImagePath(v.ID)); fi.Size() != 1<<20 {
		t.Errorf("the duplicate changed the image: size %d", fi.Size())
	}
	if got := ls(t, p.vdir); len(got) != 2 {
		t.Errorf("volumes dir holds %v, want only the first volume's files", got)
	}
}

func TestCreateInvalid(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	tests := []struct {
		req  volume.CreateRequest
		want error
	}{
		{volume.CreateRequest{Name: "", CapacityBytes: 1}, volume.ErrInvalidArgument},
		{volume.CreateRequest{Name: "a\x00b", CapacityBytes: 1}, volume.ErrInvalidArgument},
		{volume.CreateRequest{Name: "zero", CapacityBytes: 0}, volume.ErrInvalidArgument},
		{volume.CreateRequest{Name: "neg", CapacityBytes: -1}, volume.ErrInvalidArgument},
		{volume.CreateRequest{Name: "prov", CapacityBytes: 1, Provisioning: "thickish"}, volume.ErrInvalidArgument},
	}
	for _, tt := range tests {
		if _, err := p.Create(context.Background(), tt.req); !errors.Is(err, tt.want) {
			t.Errorf("Create(%+v) = %v, want %v", tt.req, err, tt.want)
		}
	}
	for _, id := range []string{"", "../x", "fv-nothex"} {
		if _, err := p.Get(id); !errors.Is(err, volume.ErrInvalidID) {
			t.Errorf("Get(%q) = %v, want ErrInvalidID", id, err)
		}
		if err := p.Delete(context.Background(), id); !errors.Is(err, volume.ErrInvalidID) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidID", id, err)
		}
		if p.ImageExists(id) {
			t.Errorf("ImageExists(%q) = true", id)
		}
	}
	if _, err := p.Get(VolumeID("nobody")); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Create(ctx, volume.CreateRequest{Name: "late", CapacityBytes: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a cancelled context = %v", err)
	}
	if got := ls(t, p.vdir); len(got) != 0 {
		t.Errorf("failed creates left %v", got)
	}
}

func TestCreateNoSpace(t *testing.T) {
	dir := testutil.Scratch(t, "pool")
	p := openPool(t, dir, Options{})
	c, err := p.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	for _, prov := range []string{volume.ProvisioningThin, volume.ProvisioningThick} {
		_, err := p.Create(context.Background(), volume.CreateRequest{Name: "huge-" + prov,
			CapacityBytes: c.AvailableBytes + 1<<40, Provisioning: prov})
		if !errors.Is(err, volume.ErrNoSpace) {
			t.Errorf("%s Create larger than the pool = %v, want ErrNoSpace", prov, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Everything but the reserve is too little, however small the volume.
	p = openPool(t, dir, Options{ReservedBytes: 1 << 62})
	c, err = p.Capacity()
	if err != nil || c.AvailableBytes != 0 || c.ReservedBytes != 1<<62 || c.FreeBytes <= 0 || c.TotalBytes < c.FreeBytes {
		t.Errorf("Capacity = %+v, %v", c, err)
	}
	_, err = p.Create(context.Background(), volume.CreateRequest{Name: "small", CapacityBytes: 4096})
	want := fmt.Sprintf("requested 4096 bytes, 0 available (%d free, %d reserved)", c.FreeBytes, int64(1)<<62)
	if !errors.Is(err, volume.ErrNoSpace) || err.Error() != volume.ErrNoSpace.Error()+": "+want {
		// FreeBytes may move between the two statfs calls; only the shape matters.
		if !errors.Is(err, volume.ErrNoSpace) {
			t.Errorf("Create within the reserve = %v, want ErrNoSpace", err)
		}
	}
	if got := ls(t, p.vdir); len(got) != 0 {
		t.Errorf("refused creates left %v", got)
	}
	if got := ls(t, p.qdir); len(got) != 0 {
		t.Errorf("quarantine holds %v", got)
	}
}

// TestCreateENOSPC runs out of space past the up-front check, on a small
// tmpfs: the check passes (the volume alone fits) but the files do not.
func TestCreateENOSPC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := testutil.Scratch(t, "pool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8m,mode=0700"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	p := openPool(t, dir, Options{})
	a := mustCreate(t, p, volume.CreateRequest{Name: "a", CapacityBytes: 5 << 20, Provisioning: volume.ProvisioningThick})
	want := []string{a.ID + ".img", a.ID + ".json"}

	// fallocate fails: makeImage on its own, as the check would refuse it.
	img := p.tmpImagePath(VolumeID("b"))
	if _, err := makeImage(img, 5<<20, true); !errors.Is(err, volume.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("makeImage beyond the free space = %v, want ErrNoSpace wrapping ENOSPC", err)
	}
	// The image takes exactly what is free, so the record does not fit.
	c, _ := p.Capacity()
	_, err := p.Create(context.Background(), volume.CreateRequest{Name: "b", CapacityBytes: c.AvailableBytes, Provisioning: volume.ProvisioningThick})
	if !errors.Is(err, volume.ErrNoSpace) {
		t.Errorf("Create of all the free space = %v, want ErrNoSpace", err)
	}
	if got := ls(t, p.vdir); !reflect.DeepEqual(got, want) {
		t.Errorf("volumes dir holds %v, want %v", got, want)
	}
	// Thin overcommit is allowed: each volume fits alone, 9 MiB in 8.
	for _, name := range []string{"c", "d"} {
		mustCreate(t, p, volume.CreateRequest{Name: name, CapacityBytes: 2 << 20})
	}
	if c, _ := p.Capacity(); c.ProvisionedBytes != 9<<20 {
		t.Errorf("ProvisionedBytes = %d, want %d", c.ProvisionedBytes, 9<<20)
	}
}

func TestThickAndThin(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	const size = 64 << 20
	for _, tt := range []struct {
		prov      string
		minBlocks int64
		maxBlocks int64
	}{
		{volume.ProvisioningThick, size, size + 1<<20},
		{volume.ProvisioningThin, 0, 0},
		{"", 0, 0},
	} {
		v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "vol-" + tt.prov, CapacityBytes: size, Provisioning: tt.prov}))
		var st syscall.Stat_t
		if err := syscall.Stat(p.ImagePath(v.ID), &st); err != nil {
			t.Fatal(err)
		}
		if alloc := st.Blocks * 512; st.Size != size || alloc < tt.minBlocks || alloc > tt.maxBlocks {
			t.Errorf("%q: size %d, allocated %d bytes, want %d allocated in [%d, %d]",
				tt.prov, st.Size, alloc, size, tt.minBlocks, tt.maxBlocks)
		}
		if want := tt.prov; want != "" && v.Provisioning != want || want == "" && v.Provisioning != volume.ProvisioningThin {
			t.Errorf("Provisioning = %q for request %q", v.Provisioning, tt.prov)
		}
	}
	if c, _ := p.Capacity(); c.ProvisionedBytes != 3*size {
		t.Errorf("ProvisionedBytes = %d, want %d", c.ProvisionedBytes, 3*size)
	}
}

func TestPermissions(t *testing.T) {
	base := testutil.Scratch(t, "pool")
	dir := base + "/nested/pool" // Open makes missing parents too
	p := openPool(t, dir, Options{})
	v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "pvc-perm", CapacityBytes: 1 << 20}))
	for path, want := range map[string]os.FileMode{
		dir:                 os.ModeDir | 0o700,
		dir + "/volumes":    os.ModeDir | 0o700,
		dir + "/quarantine": os.ModeDir | 0o700,
		dir + "/.lock":      0o600,
		p.ImagePath(v.ID):   0o600,
		p.vols.Path(v.ID):   0o600,
		base + "/nested":    os.ModeDir | 0o700,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Error(err)
		} else if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
}

func TestConcurrentCreates(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("pvc-%d-%d", w, i)
				if _, err := p.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: gib}); err != nil {
					errs <- err
				}
				_ = p.List()
				_, _ = p.Capacity()
				if i%2 == 0 {
					if err := p.Delete(context.Background(), VolumeID(name)); err != nil {
						errs <- err
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := workers * (each / 2)
	if got := len(p.List()); got != want {
		t.Errorf("List has %d volumes, want %d", got, want)
	}
	// Records only: a thin blank volume has no image before its first use.
	if got := len(ls(t, p.vdir)); got != want {
		t.Errorf("volumes dir has %d files, want %d", got, want)
	}
	if c, _ := p.Capacity(); c.ProvisionedBytes != int64(want)*gib {
		t.Errorf("ProvisionedBytes = %d, want %d", c.ProvisionedBytes, int64(want)*gib)
	}
}
