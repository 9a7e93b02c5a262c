package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/test/driver"
)

const chunk = 1 << 20

// writer appends numbered 1 MiB chunks to a file until stopped (or max
// chunks), syncing every 8: the pod that keeps writing through an expansion.
type writer struct {
	path string
	stop chan struct{}
	wg   sync.WaitGroup
	n    int // chunks written, valid after halt
	done atomic.Int64
	err  error
	// progress is closed after the first 8 chunks.
	progress chan struct{}
}

func startWriter(path string, max int) *writer {
	w := &writer{path: path, stop: make(chan struct{}), progress: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			w.err = err
			close(w.progress)
			return
		}
		defer f.Close()
		for w.n < max {
			select {
			case <-w.stop:
				return
			default:
			}
			if _, err := f.Write(pattern(uint64(w.n), chunk)); err != nil {
				w.err = err
				return
			}
			w.n++
			w.done.Add(1)
			if w.n%8 == 0 {
				if err := f.Sync(); err != nil {
					w.err = err
					return
				}
				if w.n == 8 {
					close(w.progress)
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) halt(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}

// verify checks every chunk the writer wrote.
func (w *writer) verify(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(w.path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != w.n*chunk {
		t.Fatalf("%s holds %d bytes, the writer wrote %d chunks", w.path, len(data), w.n)
	}
	for i := 0; i < w.n; i++ {
		if sha(data[i*chunk:(i+1)*chunk]) != sha(pattern(uint64(i), chunk)) {
			t.Fatalf("chunk %d of %d differs", i, w.n)
		}
	}
}

func expand(ctx context.Context, d *driver.Driver, v *vol, size int64) error {
	resp, err := d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
		VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: size}, VolumeCapability: v.cap})
	if err != nil {
		return fmt.Errorf("controller expand: %w", err)
	}
	if resp.GetCapacityBytes() != size || !resp.GetNodeExpansionRequired() {
		return fmt.Errorf("controller expand answered %v", resp)
	}
	_, err = d.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: v.id, VolumePath: v.target, StagingTargetPath: v.staging, VolumeCapability: v.cap,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size}})
	if err != nil {
		return fmt.Errorf("node expand: %w", err)
	}
	return nil
}

// TestExpandOnline grows mounted volumes while a writer runs and checks
// that the filesystem sees the new size and that every chunk is intact,
// before and after a fresh stage.
func TestExpandOnline(t *testing.T) {
	d := startOn(t, poolExt4, 8<<30)
	for _, fsType := range []string{"xfs", "btrfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) {
			needTools(t, "mkfs."+fsType)
			if fsType == "ext4" && !hasCapSysResource(t) {
				t.Skip("online ext4 growth needs CAP_SYS_RESOURCE (EXT4_IOC_RESIZE_FS): CapEff bit 24 is not set for this process " +
					"(the machine's capability bounding set lacks it); TestExpandExt4AtStage covers the offline path")
			}
			v := create(t, d, "online-"+fsType, 512<<20, driver.MountCap(fsType), nil, nil)
			up(t, d, v)
			w := startWriter(filepath.Join(v.target, "log"), 300)
			<-w.progress
			before := statfsTotal(t, v.target)
			atStart := w.done.Load()
			if err := expand(context.Background(), d, v, 2<<30); err != nil {
				w.halt(t)
				t.Fatal(err)
			}
			atEnd := w.done.Load()
			after := statfsTotal(t, v.target)
			// The writer goes on past the growth.
			for deadline := time.Now().Add(10 * time.Second); w.done.Load() < atEnd+16 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			w.halt(t)
			if int64(w.n) < atEnd+16 {
				t.Errorf("the writer stopped at chunk %d, right after the expansion", w.n)
			}
			t.Logf("%s: the writer wrote %d MiB during the expansion, %d MiB in all", fsType, atEnd-atStart, w.n)
			if after < 3*before || after < 1800<<20 {
				t.Errorf("%s filesystem: %d bytes before, %d after expanding to 2 GiB", fsType, before, after)
			}
			w.verify(t)
			down(t, d, v)
			up(t, d, v)
			w.verify(t)
			if got := statfsTotal(t, v.target); got != after {
				t.Errorf("after a fresh stage the filesystem has %d bytes, %d before", got, after)
			}
			down(t, d, v)
		})
	}
}

// TestExpandExt4AtStage is the ext4 path without CAP_SYS_RESOURCE: the
// online step says why it cannot grow the filesystem, and the next stage
// grows it offline (e2fsck -f -p, resize2fs). With the capability the
// online step succeeds and the stage has nothing to do.
func TestExpandExt4AtStage(t *testing.T) {
	needTools(t, "mkfs.ext4", "resize2fs", "e2fsck")
	ctx := context.Background()
	d := startOn(t, poolExt4, 4<<30)
	v := create(t, d, "ext4-stage", 256<<20, driver.MountCap("ext4"), nil, nil)
	up(t, d, v)
	data := pattern(7, 16<<20)
	put(t, v, data, false)
	err := expand(ctx, d, v, 1<<30)
	switch {
	case hasCapSysResource(t) && err != nil:
		t.Fatalf("online ext4 growth with CAP_SYS_RESOURCE: %v", err)
	case !hasCapSysResource(t):
		if status.Code(errors.Unwrap(err)) != codes.FailedPrecondition || !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
			t.Fatalf("online ext4 growth without CAP_SYS_RESOURCE = %v, want FAILED_PRECONDITION naming it", err)
		}
	}
	down(t, d, v)
	up(t, d, v)
	if total := statfsTotal(t, v.target); total < 900<<20 {
		t.Errorf("after the restage the ext4 filesystem has %d bytes, want about 1 GiB", total)
	}
	if sum(t, v, len(data)) != sha(data) {
		t.Error("data changed across the offline growth")
	}
	// Now the filesystem fills the device: NodeExpandVolume has nothing to do.
	if err := expand(ctx, d, v, 1<<30); err != nil {
		t.Errorf("expansion to the current size: %v", err)
	}
	// Shrinking is OUT_OF_RANGE (spec).
	_, err = d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
		VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 256 << 20, LimitBytes: 256 << 20}})
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("shrink = %v, want OUT_OF_RANGE", err)
	}
	down(t, d, v)
}

// TestExpandBlock grows a published block volume: the device grows, the
// data stays, the new range is usable.
func TestExpandBlock(t *testing.T) {
	d := startOn(t, poolXFS, 4<<30)
	v := create(t, d, "block", 64<<20, driver.BlockCap(), nil, nil)
	up(t, d, v)
	data := pattern(8, 8<<20)
	put(t, v, data, false)
	if err := expand(context.Background(), d, v, 256<<20); err != nil {
		t.Fatal(err)
	}
	if size, err := fs.BlockDeviceSize(v.target); err != nil || size != 256<<20 {
		t.Errorf("published device has %d bytes (%v), want 256 MiB", size, err)
	}
	if sum(t, v, len(data)) != sha(data) {
		t.Error("data changed")
	}
	f, err := os.OpenFile(v.target, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail := pattern(9, 1<<20)
	if _, err := f.WriteAt(tail, 200<<20); err != nil {
		t.Errorf("write into the new range: %v", err)
	}
	f.Close()
	down(t, d, v)
}

// TestExpandBtrfsSmall: btrfs cannot grow to less than 256 MiB, so a
// 128 MiB btrfs asked for 200 MiB gets 256 MiB (more than asked, as the
// spec allows), and its filesystem really grows.
func TestExpandBtrfsSmall(t *testing.T) {
	needTools(t, "mkfs.btrfs")
	ctx := context.Background()
	d := startOn(t, poolExt4, 2<<30)
	v := create(t, d, "btrfs-small", 128<<20, driver.MountCap("btrfs"), nil, nil)
	up(t, d, v)
	resp, err := d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
		VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 200 << 20}})
	if err != nil || resp.GetCapacityBytes() != 256<<20 {
		t.Fatalf("expand a 128 MiB btrfs to 200 MiB = %v, %v; want 256 MiB", resp, err)
	}
	if _, err := d.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: v.id, VolumePath: v.target, StagingTargetPath: v.staging}); err != nil {
		t.Fatal(err)
	}
	if total := statfsTotal(t, v.target); total < 250<<20 {
		t.Errorf("btrfs has %d bytes after growing to 256 MiB", total)
	}
	down(t, d, v)
}

// TestExt4GrowAfterInterruptedResize: a stage that finds the mark of an
// offline growth that never finished (resize2fs killed with the driver)
// repairs the filesystem (e2fsck -f -y) and grows it; the mark goes.
func TestExt4GrowAfterInterruptedResize(t *testing.T) {
	needTools(t, "mkfs.ext4", "resize2fs", "e2fsck")
	ctx := context.Background()
	d := startOn(t, poolExt4, 2<<30)
	v := create(t, d, "ext4-interrupted", 128<<20, driver.MountCap("ext4"), nil, nil)
	up(t, d, v)
	data := pattern(12, 8<<20)
	put(t, v, data, false)
	down(t, d, v)
	if _, err := d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
		VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 512 << 20}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Pool.NodeState().Grow.Set(v.id); err != nil { // what the killed stage left
		t.Fatal(err)
	}
	up(t, d, v)
	if d.Pool.NodeState().Grow.IsSet(v.id) {
		t.Error("the growth mark outlived a successful growth")
	}
	if total := statfsTotal(t, v.target); total < 450<<20 {
		t.Errorf("ext4 has %d bytes after the repaired growth to 512 MiB", total)
	}
	if sum(t, v, len(data)) != sha(data) {
		t.Error("data changed")
	}
	down(t, d, v)
}
