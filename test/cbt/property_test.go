package cbt

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/cbt"
	"github.com/filevol/filevol/test/driver"
)

const (
	blk     = cbt.BlockSize
	volSize = 256 << 20
	grow    = 32 << 20
	rounds  = 4
	seed    = 0x30cb7
)

// TestDeltaProperty: on each pool filesystem, a volume lives through
// rounds of random writes, overwrites with the same bytes, punched holes
// and an expansion, with a snapshot after each round. Then for each pair
// of consecutive snapshots, read byte by byte, every 4 KiB block that
// differs is in GetMetadataDelta's ranges, and every non-zero block of a
// snapshot is in GetMetadataAllocated's. It logs what a delta took and
// the ratio of the bytes it reported to the bytes the round touched.
func TestDeltaProperty(t *testing.T) {
	for _, fs := range []string{"xfs", "btrfs", "ext4"} {
		t.Run(fs, func(t *testing.T) {
			d := startOn(t, fs, 2<<30)
			r := rand.New(rand.NewPCG(seed, uint64(len(fs))))
			t.Logf("seed %#x (pool %s)", seed, fs)
			propertyRounds(t, d, r)
		})
	}
}

func propertyRounds(t *testing.T, d *driver.Driver, r *rand.Rand) {
	ctx := context.Background()
	resp, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "cbt", CapacityRange: &csipb.CapacityRange{RequiredBytes: volSize},
		VolumeCapabilities: []*csipb.VolumeCapability{driver.BlockCap()},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	v, err := d.Pool.Get(id)
	if err == nil {
		_, err = d.Pool.CommitImage(v)
	}
	if err != nil {
		t.Fatal(err)
	}
	img, err := os.OpenFile(d.Pool.ImagePath(id), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	w := &writer{t: t, f: img, r: r, size: volSize}
	w.writes(400) // the first snapshot's data
	prev := snap(t, d, "s0", id)
	checkAllocated(t, d, prev)
	for round := 1; round <= rounds; round++ {
		w.touched = map[int64]bool{}
		w.writes(100)
		w.sameBytes(50)
		w.punch(20)
		if round == 2 { // the volume grows between two snapshots
			if _, err := d.Pool.Expand(ctx, id, w.size+grow, w.size+grow); err != nil {
				t.Fatal(err)
			}
			w.size += grow
			w.writesIn(w.size-grow, grow, 20)
		}
		next := snap(t, d, fmt.Sprintf("s%d", round), id)
		start := time.Now()
		dl := delta(t, d, prev.GetSnapshotId(), next.GetSnapshotId())
		took := time.Since(start)
		if dl.capacity != w.size {
			t.Errorf("round %d: delta capacity %d, want %d", round, dl.capacity, w.size)
		}
		differ := checkDelta(t, d, prev, next, dl, round)
		held := checkAllocated(t, d, next)
		touched := int64(len(w.touched)) * blk
		t.Logf("round %d: delta in %v: reported %d KiB in %d ranges; touched %d KiB (%.3f), differing %d KiB (%.3f); target holds %d KiB",
			round, took.Round(time.Microsecond), dl.bytes()>>10, len(dl.list), touched>>10,
			float64(dl.bytes())/float64(touched), differ>>10, float64(dl.bytes())/float64(max(differ, 1)), held>>10)
		prev = next
	}
}

func snap(t *testing.T, d *driver.Driver, name, vol string) *csipb.Snapshot {
	t.Helper()
	r, err := d.Controller.CreateSnapshot(context.Background(), &csipb.CreateSnapshotRequest{Name: name, SourceVolumeId: vol})
	if err != nil {
		t.Fatalf("snapshot %s: %v", name, err)
	}
	return r.GetSnapshot()
}

// checkDelta compares the two images block by block (the base as zeros
// past its end) and fails on a differing block the delta left out. It
// returns the bytes that differ.
func checkDelta(t *testing.T, d *driver.Driver, base, target *csipb.Snapshot, dl ranges, round int) int64 {
	t.Helper()
	b, tg := readAll(t, d.Pool.SnapshotImagePath(base.GetSnapshotId())), readAll(t, d.Pool.SnapshotImagePath(target.GetSnapshotId()))
	var differ int64
	missed := 0
	for off := int64(0); off < int64(len(tg)); off += blk {
		tb := tg[off : off+blk]
		bb := make([]byte, blk)
		if off < int64(len(b)) {
			bb = b[off : off+blk]
		}
		if bytes.Equal(tb, bb) {
			continue
		}
		differ += blk
		if !dl.covers(off, blk) {
			if missed++; missed <= 5 {
				t.Errorf("round %d (seed %#x): block at %d differs and is not in the delta", round, seed, off)
			}
		}
	}
	if missed > 5 {
		t.Errorf("round %d: %d differing blocks missed in all", round, missed)
	}
	return differ
}

// checkAllocated fails on a non-zero block of the snapshot that the
// allocated list leaves out. It returns the bytes the list holds.
func checkAllocated(t *testing.T, d *driver.Driver, s *csipb.Snapshot) int64 {
	t.Helper()
	data := readAll(t, d.Pool.SnapshotImagePath(s.GetSnapshotId()))
	al := allocated(t, d, s.GetSnapshotId())
	if al.capacity != int64(len(data)) {
		t.Errorf("allocated capacity %d, image %d", al.capacity, len(data))
	}
	zero := make([]byte, blk)
	missed := 0
	for off := int64(0); off < int64(len(data)); off += blk {
		if !bytes.Equal(data[off:off+blk], zero) && !al.covers(off, blk) {
			if missed++; missed <= 5 {
				t.Errorf("snapshot %s (seed %#x): non-zero block at %d not allocated", s.GetSnapshotId(), seed, off)
			}
		}
	}
	return al.bytes()
}

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writer changes a volume's image as a loop device would, and notes the
// blocks it touched.
type writer struct {
	t       *testing.T
	f       *os.File
	r       *rand.Rand
	size    int64
	touched map[int64]bool
}

// span is a random run of 1 to 32 blocks within [from, from+n).
func (w *writer) span(from, n int64) (int64, int64) {
	l := (1 + w.r.Int64N(32)) * blk
	off := from + w.r.Int64N((n-l)/blk)*blk
	return off, l
}

func (w *writer) note(off, l int64) {
	if w.touched == nil {
		return
	}
	for b := off / blk; b < (off+l)/blk; b++ {
		w.touched[b] = true
	}
}

func (w *writer) writes(n int) { w.writesIn(0, w.size, n) }

func (w *writer) writesIn(from, size int64, n int) {
	for range n {
		off, l := w.span(from, size)
		buf := make([]byte, l)
		for i := range buf {
			buf[i] = byte(w.r.Uint32())
		}
		if _, err := w.f.WriteAt(buf, off); err != nil {
			w.t.Fatal(err)
		}
		w.note(off, l)
	}
}

// sameBytes reads runs back and writes them unchanged.
func (w *writer) sameBytes(n int) {
	for range n {
		off, l := w.span(0, w.size)
		buf := make([]byte, l)
		if _, err := w.f.ReadAt(buf, off); err != nil {
			w.t.Fatal(err)
		}
		if _, err := w.f.WriteAt(buf, off); err != nil {
			w.t.Fatal(err)
		}
		w.note(off, l)
	}
}

// punch discards runs, as a discard through the loop device does.
func (w *writer) punch(n int) {
	for range n {
		off, l := w.span(0, w.size)
		if err := unix.Fallocate(int(w.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, l); err != nil {
			w.t.Fatal(err)
		}
		w.note(off, l)
	}
}
