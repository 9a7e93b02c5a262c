package csi

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

// metaEnv is a controller on a pool in a temporary directory and its
// SnapshotMetadata service served on a unix socket, through the server's
// interceptors (the error map) as in production.
type metaEnv struct {
	t    *testing.T
	p    *pool.Pool
	c    *ControllerService
	f    *fakeStore
	meta csipb.SnapshotMetadataClient
}

func newMetaEnv(t *testing.T) *metaEnv {
	c, p, f := controllerWithSecondKind(t)
	srv := NewGRPCServer()
	csipb.RegisterSnapshotMetadataServer(srv, &SnapshotMetadataService{c: c})
	lis, err := Listen("unix://" + filepath.Join(t.TempDir(), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &metaEnv{t: t, p: p, c: c, f: f, meta: csipb.NewSnapshotMetadataClient(conn)}
}

const blk = 4096

// volume makes a committed 8 MiB image volume.
func (e *metaEnv) volume(name string) string { return e.volumeOf(name, 8<<20) }

func (e *metaEnv) volumeOf(name string, size int64) string {
	r, err := e.c.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{
		Name: name, CapacityRange: &csipb.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csipb.VolumeCapability{capBlock(rw)},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	v, err := e.p.Get(r.GetVolume().GetVolumeId())
	if err == nil {
		_, err = e.p.CommitImage(v)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v.ID
}

// write fills block n of the volume's image with b.
func (e *metaEnv) write(id string, n int64, b byte) {
	f, err := os.OpenFile(e.p.ImagePath(id), os.O_WRONLY, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(slices.Repeat([]byte{b}, blk), n*blk); err != nil {
		e.t.Fatal(err)
	}
}

func (e *metaEnv) snapshot(name, vol string) string {
	r, err := e.c.CreateSnapshot(context.Background(), &csipb.CreateSnapshotRequest{Name: name, SourceVolumeId: vol})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetSnapshot().GetSnapshotId()
}

// metaResult is what a stream said: its ranges (offset, size in bytes), how many
// messages, the capacity every message carried, and its code.
type metaResult struct {
	blocks   [][2]int64
	messages int
	capacity int64
	code     codes.Code
}

type metaMessage interface {
	GetBlockMetadataType() csipb.BlockMetadataType
	GetVolumeCapacityBytes() int64
	GetBlockMetadata() []*csipb.BlockMetadata
}

func drain[M metaMessage](t *testing.T, recv func() (M, error), maxResults int32) metaResult {
	t.Helper()
	var r metaResult
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			r.code = status.Code(err)
			return r
		}
		r.messages++
		if m.GetBlockMetadataType() != csipb.BlockMetadataType_VARIABLE_LENGTH {
			t.Errorf("message %d: type %v", r.messages, m.GetBlockMetadataType())
		}
		if r.messages > 1 && m.GetVolumeCapacityBytes() != r.capacity {
			t.Errorf("capacity changed mid-stream: %d, then %d", r.capacity, m.GetVolumeCapacityBytes())
		}
		r.capacity = m.GetVolumeCapacityBytes()
		if maxResults > 0 && len(m.GetBlockMetadata()) > int(maxResults) {
			t.Errorf("message %d holds %d tuples, max_results %d", r.messages, len(m.GetBlockMetadata()), maxResults)
		}
		for _, b := range m.GetBlockMetadata() {
			if n := len(r.blocks); n > 0 && b.GetByteOffset() < r.blocks[n-1][0]+r.blocks[n-1][1] {
				t.Errorf("tuple %v overlaps or precedes the one before", b)
			}
			r.blocks = append(r.blocks, [2]int64{b.GetByteOffset(), b.GetSizeBytes()})
		}
	}
}

// blocks lists ranges given as pairs of block numbers and counts.
func blocks(pairs ...int64) [][2]int64 {
	var out [][2]int64
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, [2]int64{pairs[i] * blk, pairs[i+1] * blk})
	}
	return out
}

func (e *metaEnv) allocated(id string, from int64, maxResults int32) metaResult {
	s, err := e.meta.GetMetadataAllocated(context.Background(), &csipb.GetMetadataAllocatedRequest{SnapshotId: id, StartingOffset: from, MaxResults: maxResults})
	if err != nil {
		e.t.Fatal(err)
	}
	return drain(e.t, s.Recv, maxResults)
}

func (e *metaEnv) delta(base, target string, from int64, maxResults int32) metaResult {
	s, err := e.meta.GetMetadataDelta(context.Background(), &csipb.GetMetadataDeltaRequest{BaseSnapshotId: base, TargetSnapshotId: target, StartingOffset: from, MaxResults: maxResults})
	if err != nil {
		e.t.Fatal(err)
	}
	return drain(e.t, s.Recv, maxResults)
}

// TestSnapshotMetadataStreams: on the test's own filesystem (copies where
// it has no reflink: the data comparison), the allocated ranges and the
// delta of two snapshots are exactly the blocks written and changed,
// paged by max_results and cut at starting_offset.
func TestSnapshotMetadataStreams(t *testing.T) {
	e := newMetaEnv(t)
	v := e.volume("v")
	for _, n := range []int64{0, 1, 2, 10, 100} {
		e.write(v, n, byte(n+1))
	}
	s1 := e.snapshot("s1", v)
	e.write(v, 1, 2)   // same bytes: no change by data, maybe by maps
	e.write(v, 2, 99)  // changed
	e.write(v, 50, 7)  // new
	e.write(v, 100, 0) // zeroed
	s2 := e.snapshot("s2", v)
	snap, _ := e.p.GetSnapshot(s2)
	t.Logf("engine %s", snap.Engine)

	got := e.allocated(s1, 0, 0)
	if got.code != codes.OK || got.capacity != 8<<20 || got.messages != 1 {
		t.Fatalf("allocated: %+v", got)
	}
	if want := blocks(0, 3, 10, 1, 100, 1); !slices.Equal(got.blocks, want) {
		t.Errorf("allocated = %v, want %v", got.blocks, want)
	}
	if got := e.allocated(s1, 1*blk+100, 1); got.messages != 3 || !slices.Equal(got.blocks, append([][2]int64{{blk + 100, 2*blk - 100}}, blocks(10, 1, 100, 1)...)) {
		t.Errorf("allocated from inside block 1, one per message: %+v", got)
	}
	// Nothing at or after the capacity: one empty message, with it.
	if got := e.allocated(s1, 8<<20, 0); got.code != codes.OK || got.messages != 1 || len(got.blocks) != 0 || got.capacity != 8<<20 {
		t.Errorf("allocated from the end: %+v", got)
	}

	d := e.delta(s1, s2, 0, 2)
	want := blocks(2, 1, 50, 1, 100, 1)
	if snap.Engine == volume.EngineReflink {
		want = blocks(1, 2, 50, 1, 100, 1) // the maps see the rewrite
	}
	if d.code != codes.OK || !slices.Equal(d.blocks, want) || d.messages != 2 {
		t.Errorf("delta = %+v, want blocks %v in 2 messages", d, want)
	}
	if d := e.delta(s1, s2, 51*blk, 0); !slices.Equal(d.blocks, blocks(100, 1)) {
		t.Errorf("delta from block 51 = %v", d.blocks)
	}
	if d := e.delta(s2, s2, 0, 0); d.code != codes.OK || len(d.blocks) != 0 || d.messages != 1 {
		t.Errorf("delta of a snapshot with itself = %+v", d)
	}
}

func TestIdentityAdvertisesSnapshotMetadata(t *testing.T) {
	s := &IdentityService{cfg: Config{Controller: true}}
	r, err := s.GetPluginCapabilities(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.GetCapabilities(), func(c *csipb.PluginCapability) bool {
		return c.GetService().GetType() == csipb.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE
	}) {
		t.Errorf("SNAPSHOT_METADATA_SERVICE not advertised: %v", r.GetCapabilities())
	}
}
