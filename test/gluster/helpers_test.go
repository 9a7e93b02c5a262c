// Package gluster_test holds the experiments behind
// docs/shared-pools-glusterfs.md: what a GlusterFS volume, mounted by two
// simulated nodes (internal/testutil/gluster), does to files, OFD locks and
// loop devices when a client works, dies or is cut off. Each test asserts
// what was observed on GlusterFS 10.3 and Linux 6.18, so that a change of
// behaviour fails it. They run as root and skip otherwise.
//
//	go test -count=1 -v ./test/gluster/           # the quick set (~1 min)
//	go test -count=1 -v ./test/gluster/ -long     # + default timeouts (~5 min)
//
// FILEVOL_GLUSTER_LONG=1 is the same as -long.
package gluster_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil/gluster"
)

var longFlag = flag.Bool("long", false, "also run the long timing experiments (GlusterFS's default timeouts, larger I/O runs)")

func long() bool { return *longFlag || os.Getenv("FILEVOL_GLUSTER_LONG") == "1" }

// sharedPoolClients starts a volume configured as a shared pool requires
// and mounts it on node-a and node-b as a shared pool's clients are.
func sharedPoolClients(t *testing.T) [2]string {
	g := gluster.Start(t, gluster.Options{Set: gluster.SharedPoolSettings})
	coherent := gluster.CoherentClientArgs
	return [2]string{g.MountNode(t, "node-a", coherent...), g.MountNode(t, "node-b", coherent...)}
}

func requireLong(t *testing.T) {
	t.Helper()
	if !long() {
		t.Skip("long experiment: run with -long or FILEVOL_GLUSTER_LONG=1")
	}
}

const mib = 1 << 20

// ofd takes (F_WRLCK) or drops (F_UNLCK) a whole-file OFD lock on f,
// without waiting.
func ofd(f *os.File, typ int16) error {
	lk := unix.Flock_t{Type: typ}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// waitLock retries ofd(f, F_WRLCK) every 20 ms while it fails with EAGAIN,
// for at most max. It returns how long it took, and the last error (nil
// when granted).
func waitLock(f *os.File, max time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		err := ofd(f, unix.F_WRLCK)
		if err == nil || !errors.Is(err, unix.EAGAIN) || time.Since(start) > max {
			return time.Since(start), err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newImage creates a sparse file of size bytes.
func newImage(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// attachLocked opens img, takes an OFD write lock through that open file,
// hands the same open file to a loop device (loop.AttachFile) and closes
// its own fd: from then on only the loop device holds the file, and the
// lock. The device is detached at cleanup.
func attachLocked(t *testing.T, img string, dio bool) loop.Device {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := ofd(f, unix.F_WRLCK); err != nil {
		t.Fatalf("lock %s: %v", img, err)
	}
	d, err := loop.AttachFile(t.Context(), f, loop.Options{DirectIO: dio})
	if err != nil {
		t.Fatalf("AttachFile %s: %v", img, err)
	}
	t.Cleanup(func() { detach(t, d) })
	return d
}

// attach attaches img by path (loop.Attach) and detaches it at cleanup.
func attach(t *testing.T, img string, opts loop.Options) loop.Device {
	t.Helper()
	d, err := loop.Attach(t.Context(), img, opts)
	if err != nil {
		t.Fatalf("Attach %s: %v", img, err)
	}
	t.Cleanup(func() { detach(t, d) })
	return d
}

// detach detaches d if it is still attached to its file. It waits for
// nothing on the network: a device whose client is dead or cut off fails
// its flush, and LOOP_CLR_FD goes on.
func detach(t *testing.T, d loop.Device) {
	t.Helper()
	if err := loop.DetachFile(d.BackingFile); err != nil {
		t.Logf("detach %s: %v", d.Path, err)
	}
}

// sysDIO reads /sys/block/loopN/loop/dio.
func sysDIO(t *testing.T, d loop.Device) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/loop/dio", d.Number))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// alignedBuf is a page-aligned buffer of n bytes (O_DIRECT needs it).
func alignedBuf(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}
