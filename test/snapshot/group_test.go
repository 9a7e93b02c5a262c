package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/test/driver"
)

// counterWriter keeps a rule across two volumes while it runs: it writes
// a counter c to volume A, then the same c to volume B, then c+1 to A...
// with plain buffered writes and no fsync, so only what a freeze flushes
// reaches the images. At any instant A holds c and B holds c or c-1; a
// copy of A and B taken at one instant (as a power loss would leave
// them) obeys the same rule. Two snapshots cut at different instants do
// not: B may be far ahead of A, or behind by more than one.
type counterWriter struct {
	a, b string // the counter files
	n    atomic.Int64
	stop chan struct{}
	done chan error
	once sync.Once
}

const counterWidth = 20 // fixed width: each write overwrites the whole value

func startCounter(t *testing.T, a, b *vol) *counterWriter {
	t.Helper()
	w := &counterWriter{a: filepath.Join(a.target, "counter"), b: filepath.Join(b.target, "counter"), stop: make(chan struct{}), done: make(chan error, 1)}
	fa, err := os.OpenFile(w.a, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.OpenFile(w.b, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		fa.Close()
		t.Fatal(err)
	}
	go func() {
		defer fa.Close()
		defer fb.Close()
		for c := int64(1); ; c++ {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			v := []byte(fmt.Sprintf("%0*d", counterWidth, c))
			if _, err := fa.WriteAt(v, 0); err != nil {
				w.done <- err
				return
			}
			if _, err := fb.WriteAt(v, 0); err != nil {
				w.done <- err
				return
			}
			w.n.Store(c)
		}
	}()
	t.Cleanup(func() { w.halt(t) })
	return w
}

func (w *counterWriter) halt(t *testing.T) {
	w.once.Do(func() {
		close(w.stop)
		if err := <-w.done; err != nil {
			t.Errorf("counter writer: %v", err)
		}
	})
}

func readCounter(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0 // created, not yet written when the snapshot was cut
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s holds %q: %v", path, b, err)
	}
	return n
}

// TestGroupSnapshotIsCrashConsistent: a writer keeps the counter rule
// across an xfs and an ext4 volume on an xfs pool; group snapshots cut
// while it runs are restored to new volumes, mounted, and each restored
// pair obeys the rule. Then the group is deleted with its members, and
// no filesystem is left frozen.
func TestGroupSnapshotIsCrashConsistent(t *testing.T) {
	needTools(t, "mkfs.xfs", "mkfs.ext4")
	d := startOn(t, poolXFS, 8<<30)
	ctx := context.Background()
	a := create(t, d, "a", 512<<20, driver.MountCap("xfs"), nil, nil)
	b := create(t, d, "b", 512<<20, driver.MountCap("ext4"), nil, nil)
	up(t, d, a)
	up(t, d, b)
	w := startCounter(t, a, b)
	const rounds = 5
	for i := range rounds {
		for w.n.Load() < int64(1000*(i+1)) { // let it run between cuts
			time.Sleep(time.Millisecond)
		}
		resp, err := d.Group.CreateVolumeGroupSnapshot(ctx, &csipb.CreateVolumeGroupSnapshotRequest{
			Name: fmt.Sprintf("group-%d", i), SourceVolumeIds: []string{a.id, b.id}})
		if err != nil {
			t.Fatalf("group snapshot %d: %v", i, err)
		}
		g := resp.GetGroupSnapshot()
		if len(g.GetSnapshots()) != 2 || !g.GetReadyToUse() {
			t.Fatalf("group snapshot %d = %v", i, g)
		}
		ra := create(t, d, fmt.Sprintf("ra-%d", i), 512<<20, a.cap, nil, fromSnapshot(g.GetSnapshots()[0].GetSnapshotId()))
		rb := create(t, d, fmt.Sprintf("rb-%d", i), 512<<20, b.cap, nil, fromSnapshot(g.GetSnapshots()[1].GetSnapshotId()))
		up(t, d, ra)
		up(t, d, rb)
		ca, cb := readCounter(t, filepath.Join(ra.target, "counter")), readCounter(t, filepath.Join(rb.target, "counter"))
		t.Logf("group %d: restored A=%d B=%d (the writer was at %d)", i, ca, cb, w.n.Load())
		if ca != cb && ca != cb+1 {
			t.Errorf("group %d: restored A=%d, B=%d: the pair breaks the rule (A = B or B+1): not cut at one instant", i, ca, cb)
		}
		if ca < int64(1000*(i+1)) {
			t.Errorf("group %d: restored A=%d, below what the writer had written before the cut (%d): the freeze did not flush it", i, ca, 1000*(i+1))
		}
		down(t, d, ra)
		down(t, d, rb)
		for _, r := range []*vol{ra, rb} {
			if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: r.id}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.Group.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{
			GroupSnapshotId: g.GetGroupSnapshotId(), SnapshotIds: []string{g.GetSnapshots()[0].GetSnapshotId(), g.GetSnapshots()[1].GetSnapshotId()}}); err != nil {
			t.Fatal(err)
		}
	}
	w.halt(t)
	if snaps := d.Pool.ListSnapshots(); len(snaps) != 0 {
		t.Errorf("%d snapshot(s) left after the groups' deletes", len(snaps))
	}
	for _, v := range []*vol{a, b} {
		if err := fs.Freeze(v.staging); err != nil {
			t.Errorf("%s: FIFREEZE after the group snapshots = %v: left frozen?", v.name, err)
		} else {
			_ = fs.Thaw(v.staging)
		}
	}
	down(t, d, a)
	down(t, d, b)
}
