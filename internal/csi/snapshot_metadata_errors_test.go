package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// TestSnapshotMetadataErrors: the codes the spec names for each wrong input.
func TestSnapshotMetadataErrors(t *testing.T) {
	e := newMetaEnv(t)
	v, w := e.volume("v"), e.volume("w")
	e.write(v, 3, 1)
	s1 := e.snapshot("s1", v)
	time.Sleep(2 * time.Millisecond) // creation times apart
	s2 := e.snapshot("s2", v)
	other := e.snapshot("other", w)
	gone := e.snapshot("gone", v)
	if _, err := e.c.DeleteSnapshot(context.Background(), &csipb.DeleteSnapshotRequest{SnapshotId: gone}); err != nil {
		t.Fatal(err)
	}
	// A directory volume's snapshot, in a store of another kind.
	dirSnap := volid.NewSnapshot(fakePool, "d")
	e.f.snaps[dirSnap] = volume.Snapshot{ID: dirSnap, SourceVolumeID: volid.NewVolume(volid.KindDir, fakePool, "d"), CreatedAt: time.Now()}

	alloc := []struct {
		name string
		id   string
		from int64
		max  int32
		want codes.Code
	}{
		{"no ID", "", 0, 0, codes.InvalidArgument},
		{"unknown", e.p.SnapshotID("nope"), 0, 0, codes.NotFound},
		{"not an ID", "fs1-zzz", 0, 0, codes.NotFound},
		{"pool not served", volid.NewSnapshot("0badbeef", "x"), 0, 0, codes.NotFound},
		{"deleted", gone, 0, 0, codes.NotFound},
		{"negative offset", s1, -1, 0, codes.OutOfRange},
		{"offset past the end", s1, 8<<20 + 1, 0, codes.OutOfRange},
		{"negative max_results", s1, 0, -1, codes.InvalidArgument},
		{"directory volume", dirSnap, 0, 0, codes.FailedPrecondition},
		{"fine", s1, 0, 0, codes.OK},
	}
	for _, c := range alloc {
		if got := e.allocated(c.id, c.from, c.max); got.code != c.want {
			t.Errorf("allocated, %s: %v, want %v", c.name, got.code, c.want)
		}
	}
	delta := []struct {
		name         string
		base, target string
		from         int64
		want         codes.Code
	}{
		{"no base", "", s2, 0, codes.InvalidArgument},
		{"no target", s1, "", 0, codes.InvalidArgument},
		{"base deleted", gone, s2, 0, codes.NotFound},
		{"target unknown", s1, e.p.SnapshotID("nope"), 0, codes.NotFound},
		{"other volume", s1, other, 0, codes.InvalidArgument},
		{"base newer", s2, s1, 0, codes.InvalidArgument},
		{"offset past the end", s1, s2, 9 << 20, codes.OutOfRange},
		{"negative offset", s1, s2, -4096, codes.OutOfRange},
		{"directory volume", dirSnap, s2, 0, codes.FailedPrecondition},
		{"fine", s1, s2, 0, codes.OK},
	}
	for _, c := range delta {
		if got := e.delta(c.base, c.target, c.from, 0); got.code != c.want {
			t.Errorf("delta, %s: %v, want %v", c.name, got.code, c.want)
		}
	}
}

// TestSnapshotMetadataCancelledStream: a caller that goes away mid-stream
// (or a driver killed in one) leaves nothing behind: the service writes
// nothing, and the images it held open are closed when the stream ends.
func TestSnapshotMetadataCancelledStream(t *testing.T) {
	e := newMetaEnv(t)
	// More messages than the stream's flow-control window holds, so the
	// handler is still sending when the caller goes.
	v := e.volumeOf("v", 32<<20)
	f, err := os.OpenFile(e.p.ImagePath(v), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for n := int64(0); n < 8192; n += 2 {
		if _, err := f.WriteAt([]byte{1}, n*blk); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	s1 := e.snapshot("s1", v)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.meta.GetMetadataAllocated(ctx, &csipb.GetMetadataAllocatedRequest{SnapshotId: s1, MaxResults: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	img := e.p.SnapshotImagePath(s1)
	if openFiles(t, img) == 0 {
		t.Log("the stream ended before the caller went: nothing left to see")
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for openFiles(t, img) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still open after the stream was cancelled", img)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openFiles counts this process's descriptors open on path.
func openFiles(t *testing.T, path string) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && l == path {
			n++
		}
	}
	return n
}
