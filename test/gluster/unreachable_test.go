package gluster_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/gluster"
)

// TestLoopDeviceOnADeadClientsFile: what the kernel still shows of a loop
// device attached on a file of a FUSE client that died, and what a cut-off
// client's device shows. A's device, attached with the lock and owner a
// shared pool's node uses, answers LOOP_GET_STATUS64 with ENOTCONN once
// A's client is killed (loop.Unreachable): no identity (BackedBy false),
// no owner; sysfs still names the file. After A's client is started again
// over the lazily unmounted dead mount the name is relative to that mount
// ("/pool/x.img"), loop.Names still matches it against the path through
// the new mount, and DetachUnreachable detaches it; on B's live device it
// does nothing. B, cut off, answers ENOTCONN too once its client gives up
// on the server (ping-timeout), and answers again once restored: a device
// that is Unreachable is not always dead for good, so whose it is must be
// decided from something other than the error.
func TestLoopDeviceOnADeadClientsFile(t *testing.T) {
	testutil.RequireRoot(t)
	g := gluster.Start(t, gluster.Options{PingTimeout: 2 * time.Second})
	args := gluster.CoherentClientArgs
	a := g.MountNode(t, "node-a", args...)
	b := g.MountNode(t, "node-b", args...)
	imgA, imgB := filepath.Join(a, "x.img"), filepath.Join(b, "y.img")
	newImage(t, imgA, 16*mib)
	newImage(t, imgB, 16*mib)
	dA := attach(t, imgA, loop.Options{Lock: true, Owner: "filevol/node-a"})
	dB := attach(t, imgB, loop.Options{Lock: true, Owner: "filevol/node-b"})
	t.Cleanup(func() {
		if d, ok := attachedAs(t, dA); ok {
			_ = loop.DetachUnreachable(d)
		}
	})
	if loop.Unreachable(dA) || loop.Owner(dA) != "filevol/node-a" || !loop.BackedBy(dA, imgA) {
		t.Fatalf("live device %s: unreachable %v, owner %q, backed by %s %v", dA.Path,
			loop.Unreachable(dA), loop.Owner(dA), imgA, loop.BackedBy(dA, imgA))
	}

	g.KillClient(t, "node-a")
	if !loop.Unreachable(dA) {
		t.Fatalf("%s on a dead client's file is not unreachable", dA.Path)
	}
	if o := loop.Owner(dA); o != "" || loop.BackedBy(dA, imgA) {
		t.Fatalf("dead client's device %s: owner %q, backed by %v: want neither readable", dA.Path, o, loop.BackedBy(dA, imgA))
	}
	if loop.Unreachable(dB) {
		t.Fatalf("%s on a live client's file is unreachable", dB.Path)
	}

	g.RestartClient(t, "node-a", args...)
	d, ok := attachedAs(t, dA)
	if !ok || d.BackingFile != "/x.img" || !loop.Unreachable(d) || !loop.Names(d, imgA) || loop.Names(d, imgB) {
		t.Fatalf("after the client's restart %s shows %q (attached %v, unreachable %v, names %s %v, names %s %v)",
			dA.Path, d.BackingFile, ok, loop.Unreachable(d), imgA, loop.Names(d, imgA), imgB, loop.Names(d, imgB))
	}
	if err := loop.DetachUnreachable(dB); err != nil {
		t.Fatalf("DetachUnreachable on a live device: %v", err)
	}
	if _, ok := attachedAs(t, dB); !ok {
		t.Fatalf("DetachUnreachable detached the live device %s", dB.Path)
	}
	if err := loop.DetachUnreachable(d); err != nil {
		t.Fatalf("DetachUnreachable %s: %v", d.Path, err)
	}
	if _, ok := attachedAs(t, dA); ok {
		t.Fatalf("%s still attached after DetachUnreachable", dA.Path)
	}

	g.CutOff(t, "node-b")
	start := time.Now()
	for !loop.Unreachable(dB) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s of a cut-off client still answers after %v", dB.Path, time.Since(start))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("cut-off client's device %s unreachable after %v", dB.Path, time.Since(start).Round(100*time.Millisecond))
	g.Restore(t, "node-b")
	start = time.Now()
	for loop.Unreachable(dB) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("%s of a restored client still unreachable after %v", dB.Path, time.Since(start))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("restored client's device %s answers again after %v", dB.Path, time.Since(start).Round(100*time.Millisecond))
}

// attachedAs returns d as the kernel shows it now, if the same number is
// still attached to a file of the same name.
func attachedAs(t *testing.T, d loop.Device) (loop.Device, bool) {
	t.Helper()
	devs, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range devs {
		if x.Path == d.Path && filepath.Base(x.BackingFile) == filepath.Base(d.BackingFile) {
			return x, true
		}
	}
	return loop.Device{}, false
}
