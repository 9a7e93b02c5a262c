package csi

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
)

// holdOpen starts a process that holds dev open (its fd 3), as a pod's
// process holding a block device would, and returns it; it dies with the
// test, at its cleanup, with the test process (Pdeathsig) or after two
// minutes, whichever comes first, so a killed run leaves no holder.
func holdOpen(t *testing.T, dev string) *exec.Cmd {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("sleep", "120")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// losetupDetach is an operator's `losetup -d dev`: LOOP_CLR_FD on a plain
// open of the device. The kernel only marks a device something else holds
// (autoclear) and answers success.
func losetupDetach(t *testing.T, dev string) {
	t.Helper()
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil {
		t.Fatalf("LOOP_CLR_FD %s: %v", dev, err)
	}
}

// TestNodeRecordsAPendingDetachOnTheKernel: on the real kernel, a shared
// pool's volume staged on n1 (its filesystem mounted at the staging path),
// its device also held open by a process, then detached as an operator's
// losetup -d does: the device stays, marked autoclear. The node's sweep
// records the detach pending in n1's in-use record, naming the process
// and the staging mount. Once both let go, the kernel frees the device
// and the next sweep drops the record.
func TestNodeRecordsAPendingDetachOnTheKernel(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"mkfs.ext4", "sleep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := testutil.Scratch(t, "csi-autoclear") // its cleanup unmounts and detaches what is left under dir
	e, _ := sharedNodeEnvOn(t, dir, hostos.New)
	ctx := context.Background()
	id := e.volume("a", "ext4", 32<<20)
	staging := e.staging("a")
	e.stageAttached(id, staging, capMount("ext4", rw))
	find := func() []loop.Device {
		t.Helper()
		devs, err := loop.Find(e.image(id))
		if err != nil {
			t.Fatal(err)
		}
		return devs
	}
	devs := find()
	if len(devs) != 1 {
		t.Fatalf("devices of the staged volume: %+v", devs)
	}
	dev := devs[0].Path
	if rec, _ := e.record(id); rec.Device != dev || rec.Pending != nil {
		t.Fatalf("record after stage: %+v, want device %s and nothing pending", rec, dev)
	}

	holder := holdOpen(t, dev)
	losetupDetach(t, dev)
	if devs := find(); len(devs) != 1 || !devs[0].Detaching {
		t.Fatalf("after losetup -d of a held device: %+v, want it there with autoclear set", devs)
	}
	if _, err := e.node.GC(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _ := e.record(id)
	p := rec.Pending
	if p == nil || p.Device != dev || p.Seen.IsZero() {
		t.Fatalf("record after the sweep: %+v, want the detach of %s pending", rec, dev)
	}
	for _, want := range []string{"pid " + strconv.Itoa(holder.Process.Pid) + " (sleep)", staging} {
		if !strings.Contains(p.Holders, want) {
			t.Errorf("the record's holders %q do not name %q", p.Holders, want)
		}
	}
	t.Logf("recorded holders of %s: %s", dev, p.Holders)

	// The holders let go: the process ends, the mount goes (what kubelet
	// and the pod's end would do); the kernel frees the device.
	_ = holder.Process.Kill()
	_ = holder.Wait()
	if err := unix.Unmount(staging, 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); len(find()) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("device still attached once nothing holds it: %+v", find())
		}
	}
	if _, err := e.node.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, ok := e.record(id); ok {
		t.Errorf("record kept once the device is gone: %+v", rec)
	}
}
