package pool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// writeAtImage writes data into a volume's image at off, as a loop device would.
func writeAtImage(t *testing.T, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

func readAtImage(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSnapshotCreateGetListDelete(t *testing.T) {
	ctx := context.Background()
	p := openPool(t, testutil.Scratch(t, "pool"), Options{NodeID: "node-a"})
	v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "pvc-src", CapacityBytes: 64 << 20, FSType: "xfs"}))
	data := bytes.Repeat([]byte("snap"), 1<<18) // 1 MiB
	writeAtImage(t, p.ImagePath(v.ID), 8<<20, data)

	req := volume.SnapshotRequest{Name: "snap-1", SourceVolumeID: v.ID, Parameters: map[string]string{"k": "v"}}
	s, err := p.CreateSnapshot(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != SnapshotID("snap-1") || !strings.HasPrefix(s.ID, "fs1-") || s.SizeBytes != 64<<20 ||
		s.FSType != "xfs" || s.Node != "node-a" || s.SourceVolumeID != v.ID || s.Engine == "" {
		t.Errorf("CreateSnapshot = %+v", s)
	}
	req.Parameters["k"] = "changed" // the record keeps its own copy
	// CSI: same name + same source → the same snapshot, not a new one.
	again, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap-1", SourceVolumeID: v.ID})
	if err != nil || !reflect.DeepEqual(again, s) {
		t.Errorf("retried CreateSnapshot = %+v, %v; want %+v", again, err, s)
	}
	other := mustCreate(t, p, volume.CreateRequest{Name: "pvc-other", CapacityBytes: 1 << 20})
	if _, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap-1", SourceVolumeID: other.ID}); !errors.Is(err, volume.ErrAlreadyExists) {
		t.Errorf("same name, other source = %v, want ErrAlreadyExists", err)
	}
	if _, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap-x", SourceVolumeID: VolumeID("nope")}); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("missing source = %v, want ErrNotFound", err)
	}
	if got, err := p.GetSnapshot(s.ID); err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("GetSnapshot = %+v, %v", got, err)
	}
	if got := readAtImage(t, p.SnapshotImagePath(s.ID), 8<<20, len(data)); !bytes.Equal(got, data) {
		t.Error("snapshot image does not hold the volume's data")
	}

	// Independent files: overwriting or deleting the volume leaves the snapshot.
	writeAtImage(t, p.ImagePath(v.ID), 8<<20, bytes.Repeat([]byte("XXXX"), 1<<18))
	if err := p.Delete(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if got := readAtImage(t, p.SnapshotImagePath(s.ID), 8<<20, len(data)); !bytes.Equal(got, data) {
		t.Error("snapshot changed with its volume")
	}
	s2, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap-0", SourceVolumeID: other.ID})
	if err != nil {
		t.Fatal(err)
	}
	if l := p.ListSnapshots(); len(l) != 2 || l[0].ID > l[1].ID {
		t.Errorf("ListSnapshots = %+v", l)
	}
	for range 2 { // CSI: deleting a missing snapshot succeeds
		if err := p.DeleteSnapshot(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.GetSnapshot(s.ID); !errors.Is(err, volume.ErrSnapshotNotFound) {
		t.Errorf("GetSnapshot after delete = %v", err)
	}
	if l := p.ListSnapshots(); len(l) != 1 || l[0].ID != s2.ID {
		t.Errorf("ListSnapshots after delete = %+v", l)
	}
	if got := ls(t, p.sdir); len(got) != 2 { // s2's image and record
		t.Errorf("snapshots dir holds %v", got)
	}
	for _, bad := range []string{"", "fs-../../etc", "fv-" + strings.Repeat("0", 32), SnapshotID("a") + "/"} {
		if _, err := p.GetSnapshot(bad); !errors.Is(err, volume.ErrInvalidID) {
			t.Errorf("GetSnapshot(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
}

func TestRestoreAndClone(t *testing.T) {
	ctx := context.Background()
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "pvc-src", CapacityBytes: 32 << 20, FSType: "ext4"}))
	data := bytes.Repeat([]byte{0xa5}, 1<<20)
	writeAtImage(t, p.ImagePath(v.ID), 4<<20, data)
	s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap", SourceVolumeID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		src  volume.ContentSource
		prov string
	}{
		{"restore-thin", volume.ContentSource{Kind: volume.SourceSnapshot, ID: s.ID}, volume.ProvisioningThin},
		{"restore-thick", volume.ContentSource{Kind: volume.SourceSnapshot, ID: s.ID}, volume.ProvisioningThick},
		{"clone", volume.ContentSource{Kind: volume.SourceVolume, ID: v.ID}, volume.ProvisioningThin},
	} {
		r, err := p.Create(ctx, volume.CreateRequest{Name: tc.name, CapacityBytes: 64 << 20, Provisioning: tc.prov, Source: &tc.src})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.ContentSource == nil || *r.ContentSource != tc.src {
			t.Errorf("%s: content source %+v", tc.name, r.ContentSource)
		}
		if got, _ := p.Get(r.ID); !reflect.DeepEqual(got, r) {
			t.Errorf("%s: record %+v, want %+v", tc.name, got, r)
		}
		fi, err := os.Stat(p.ImagePath(r.ID))
		if err != nil || fi.Size() != 64<<20 {
			t.Fatalf("%s: image %v %v, want 64 MiB (bigger than its source)", tc.name, fi, err)
		}
		if got := readAtImage(t, p.ImagePath(r.ID), 4<<20, len(data)); !bytes.Equal(got, data) {
			t.Errorf("%s: data differs", tc.name)
		}
		if blocks := allocated(t, p.ImagePath(r.ID)); tc.prov == volume.ProvisioningThick && blocks < 64<<20 {
			t.Errorf("%s: thick restore holds %d bytes, want all 64 MiB allocated", tc.name, blocks)
		}
	}
	if _, err := p.Create(ctx, volume.CreateRequest{Name: "small", CapacityBytes: 16 << 20,
		Source: &volume.ContentSource{Kind: volume.SourceSnapshot, ID: s.ID}}); !errors.Is(err, volume.ErrInvalidArgument) {
		t.Errorf("restore smaller than its snapshot = %v, want ErrInvalidArgument", err)
	}
	if _, err := p.Create(ctx, volume.CreateRequest{Name: "nosnap", CapacityBytes: 64 << 20,
		Source: &volume.ContentSource{Kind: volume.SourceSnapshot, ID: SnapshotID("none")}}); !errors.Is(err, volume.ErrSnapshotNotFound) {
		t.Errorf("restore of a missing snapshot = %v, want ErrSnapshotNotFound", err)
	}
	if got := ls(t, p.vdir); len(got) != 8 { // 4 volumes
		t.Errorf("failed creates left files: %v", got)
	}
}

// TestSourceOfAnotherNode: records name their node; a pool directory seen
// by another node (shared storage, a renamed node) refuses to clone there.
func TestSourceOfAnotherNode(t *testing.T) {
	ctx := context.Background()
	dir := testutil.Scratch(t, "pool")
	a := openPool(t, dir, Options{NodeID: "node-a"})
	v := mustCreate(t, a, volume.CreateRequest{Name: "pvc-a", CapacityBytes: 1 << 20})
	s, err := a.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap-a", SourceVolumeID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	b := openPool(t, dir, Options{NodeID: "node-b"})
	if _, err := b.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap-b", SourceVolumeID: v.ID}); !errors.Is(err, ErrOtherNode) {
		t.Errorf("snapshot of node-a's volume on node-b = %v, want ErrOtherNode", err)
	}
	for _, src := range []volume.ContentSource{{Kind: volume.SourceSnapshot, ID: s.ID}, {Kind: volume.SourceVolume, ID: v.ID}} {
		_, err := b.Create(ctx, volume.CreateRequest{Name: "pvc-b", CapacityBytes: 1 << 20, Source: &src})
		if !errors.Is(err, ErrOtherNode) || !strings.Contains(err.Error(), "node-a") {
			t.Errorf("%s source of node-a on node-b = %v, want ErrOtherNode naming node-a", src.Kind, err)
		}
	}
}

// TestCopyPreservesHoles: on a filesystem without reflink (the scratch
// directory is ext4) the copy allocates what was written, not the size.
func TestCopyPreservesHoles(t *testing.T) {
	ctx := context.Background()
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "pvc-sparse", CapacityBytes: 1 << 30}))
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, off := range []int64{0, 100 << 20, 512 << 20, 1<<30 - 1<<20} {
		writeAtImage(t, p.ImagePath(v.ID), off, chunk)
	}
	s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap", SourceVolumeID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	if s.Engine != volume.EngineCopy {
		t.Skipf("the scratch filesystem reflinks (engine %s); the copy is tested on ext4", s.Engine)
	}
	if got := allocated(t, p.SnapshotImagePath(s.ID)); got < 4<<20 || got > 8<<20 {
		t.Errorf("copy of 4 MiB written into 1 GiB allocates %d bytes", got)
	}
	for _, off := range []int64{0, 100 << 20, 512 << 20, 1<<30 - 1<<20} {
		if got := readAtImage(t, p.SnapshotImagePath(s.ID), off, len(chunk)); !bytes.Equal(got, chunk) {
			t.Errorf("data at %d differs", off)
		}
	}
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st = statT(t, path)
	return st.Blocks * 512
}
