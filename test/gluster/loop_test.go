package gluster_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/gluster"
)

// TestLoopDeviceOnAGlusterImage: a loop device on an image file in the
// volume, attached as filevol attaches (LOOP_CONFIGURE, direct I/O asked
// for), formats with ext4, mounts and takes writes; node B, attaching the
// same image read-only after A detached, reads them. The kernel does
// direct I/O on it: /sys/block/loopN/loop/dio is 1 (FUSE files accept
// O_DIRECT on this kernel), not 0 as one might expect of FUSE.
func TestLoopDeviceOnAGlusterImage(t *testing.T) {
	testutil.RequireRoot(t)
	for _, prog := range []string{"mkfs.ext4"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s missing: run hack/install-deps.sh", prog)
		}
	}
	g := gluster.Start(t)
	a := g.MountNode(t, "node-a")
	b := g.MountNode(t, "node-b")
	img := filepath.Join(a, "vol.img")
	newImage(t, img, 256*mib)

	d := attach(t, img, loop.Options{DirectIO: true})
	if got := sysDIO(t, d); got != "1" || !d.DirectIO {
		t.Errorf("dio = %s (Device.DirectIO %v), want 1: direct I/O on a GlusterFS image", got, d.DirectIO)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", d.Path).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	fsA := filepath.Join(g.Dir(), "fs-a")
	if err := os.MkdirAll(fsA, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(d.Path, fsA, "ext4", 0, ""); err != nil {
		t.Fatalf("mount: %v", err)
	}
	data := bytes.Repeat([]byte("through the loop device on A\n"), 200000) // ~5.8 MB
	if err := os.WriteFile(filepath.Join(fsA, "data"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(fsA, 0); err != nil {
		t.Fatal(err)
	}
	detach(t, d)

	// Node B reads what A wrote, through its own client.
	dB := attach(t, filepath.Join(b, "vol.img"), loop.Options{ReadOnly: true, DirectIO: true})
	fsB := filepath.Join(g.Dir(), "fs-b")
	if err := os.MkdirAll(fsB, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dB.Path, fsB, "ext4", unix.MS_RDONLY, "noload"); err != nil {
		t.Fatalf("mount on B: %v", err)
	}
	defer unix.Unmount(fsB, 0)
	got, err := os.ReadFile(filepath.Join(fsB, "data"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("B reads %d bytes (%v), want A's %d", len(got), err, len(data))
	}
}

// TestLoopDirectIOCost compares a loop device on a GlusterFS image with
// direct I/O (dio 1, as filevol attaches) and without (dio 0), and a loop
// device on a local ext4 image as the baseline: sequential 1 MiB and
// random 4 KiB O_DIRECT writes, and random 4 KiB O_DIRECT reads, on the
// device. It asserts only that every run moved data; the numbers are for
// the doc (they depend on the machine's load).
func TestLoopDirectIOCost(t *testing.T) {
	testutil.RequireRoot(t)
	seqBytes, randFor := int64(64*mib), 1*time.Second
	if long() {
		seqBytes, randFor = 256*mib, 10*time.Second
	}
	g := gluster.Start(t)
	a := g.MountNode(t, "node-a")
	local := testutil.Scratch(t, "gluster-dio")
	for _, tc := range []struct {
		name string
		dir  string
		dio  bool
	}{
		{"gluster-dio1", a, true},
		{"gluster-dio0", a, false},
		{"local-ext4-dio1", local, true},
		{"local-ext4-dio0", local, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(tc.dir, tc.name+".img")
			newImage(t, img, seqBytes)
			d := attach(t, img, loop.Options{DirectIO: tc.dio})
			want := "0"
			if tc.dio {
				want = "1"
			}
			if got := sysDIO(t, d); got != want {
				t.Errorf("dio = %s, want %s", got, want)
			}
			seq := ioRun(t, d.Path, true, 1*mib, seqBytes, 0)
			rw := ioRun(t, d.Path, true, 4096, seqBytes, randFor)
			rr := ioRun(t, d.Path, false, 4096, seqBytes, randFor)
			t.Logf("%-16s dio=%s  seq write 1M: %7.1f MB/s   rand write 4k: %6.0f IOPS   rand read 4k: %6.0f IOPS",
				tc.name, sysDIO(t, d), seq.mbps(), rw.iops(), rr.iops())
			if seq.ops == 0 || rw.ops == 0 || rr.ops == 0 {
				t.Errorf("a run did nothing: %+v %+v %+v", seq, rw, rr)
			}
		})
	}
}

type ioResult struct {
	ops   int
	bytes int64
	took  time.Duration
}

func (r ioResult) mbps() float64 { return float64(r.bytes) / 1e6 / r.took.Seconds() }
func (r ioResult) iops() float64 { return float64(r.ops) / r.took.Seconds() }

// ioRun does O_DIRECT I/O of bs bytes on dev: sequential over size bytes
// when dur is 0, else at random aligned offsets below size for dur; writes
// end with an fsync (counted).
func ioRun(t *testing.T, dev string, write bool, bs int, size int64, dur time.Duration) ioResult {
	t.Helper()
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_RDWR
	}
	fd, err := unix.Open(dev, flags|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := alignedBuf(t, bs)
	for i := range buf {
		buf[i] = byte(i)
	}
	var r ioResult
	start := time.Now()
	blocks := size / int64(bs)
	for i := int64(0); ; i++ {
		off := i * int64(bs)
		if dur == 0 {
			if off >= size {
				break
			}
		} else {
			if time.Since(start) >= dur {
				break
			}
			off = rand.Int64N(blocks) * int64(bs)
		}
		var n int
		if write {
			n, err = unix.Pwrite(fd, buf, off)
		} else {
			n, err = unix.Pread(fd, buf, off)
		}
		if err != nil {
			t.Fatalf("%s at %d: %v", dev, off, err)
		}
		r.ops++
		r.bytes += int64(n)
	}
	if write {
		if err := unix.Fsync(fd); err != nil {
			t.Fatalf("fsync %s: %v", dev, err)
		}
	}
	r.took = time.Since(start)
	return r
}
