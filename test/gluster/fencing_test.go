package gluster_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/gluster"
	"github.com/filevol/filevol/test/errno"
	"github.com/filevol/filevol/test/marker"
)

// TestLockLivesWithTheLoopDevice: the fencing mechanism itself. Node A opens the
// image, takes an OFD write lock through that open file, gives the same
// open file to LOOP_CONFIGURE (loop.AttachFile) and closes its fd. The
// loop device now holds the file and so the lock: B's lock is refused for
// as long as the device exists (checked over 2 s, and after the process
// that attached it closed everything), and granted as soon as the device
// is detached. Same on GlusterFS (the server holds the lock for A's client)
// and on a local directory (the kernel holds it for every "node").
func TestLockLivesWithTheLoopDevice(t *testing.T) {
	testutil.RequireRoot(t)
	for _, where := range []string{"gluster", "local"} {
		t.Run(where, func(t *testing.T) {
			var dirA, dirB, brick string
			if where == "gluster" {
				g := gluster.Start(t)
				dirA, dirB, brick = g.MountNode(t, "node-a"), g.MountNode(t, "node-b"), g.BrickDir()
			} else {
				dirA = testutil.Scratch(t, "gluster-local")
				dirB, brick = dirA, dirA
			}
			newImage(t, filepath.Join(dirA, "img"), 16*mib)
			d := attachLocked(t, filepath.Join(dirA, "img"), true)

			fb, err := os.OpenFile(filepath.Join(dirB, "img"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fb.Close()
			for i := range 5 {
				if err := ofd(fb, unix.F_WRLCK); !errors.Is(err, unix.EAGAIN) {
					t.Fatalf("B's lock %d while A's loop device holds the image: %v, want EAGAIN", i, errno.Name(err))
				}
				if w := marker.Write(d.Path, int64(i)*mib, "A"); !w.OK() {
					t.Fatalf("A's write through its loop device: %v", w)
				}
				time.Sleep(400 * time.Millisecond)
			}
			if !marker.Holds(t, filepath.Join(brick, "img"), 0, "A") {
				t.Errorf("A's write did not reach the image")
			}
			detach(t, d)
			took, err := waitLock(fb, 5*time.Second)
			if err != nil {
				t.Fatalf("B's lock after A's loop device was detached: %v after %v", errno.Name(err), took)
			}
			t.Logf("B got the lock %v after the detach", took.Round(10*time.Microsecond))
		})
	}
}

// TestClientDies: A holds the image's lock through its loop device; A's
// glusterfs client is killed (SIGKILL). Its TCP connections close with it,
// and the server drops its locks at once: B gets the lock within
// milliseconds. What A's loop device writes afterwards fails (EIO to the
// writer: the dead FUSE connection answers ENOTCONN) and reaches nothing.
func TestClientDies(t *testing.T) {
	for _, dio := range []bool{true, false} {
		name := "dio1"
		if !dio {
			name = "dio0"
		}
		t.Run(name, func(t *testing.T) {
			g := gluster.Start(t)
			a, b := g.MountNode(t, "node-a"), g.MountNode(t, "node-b")
			img := filepath.Join(g.BrickDir(), "img")
			newImage(t, filepath.Join(a, "img"), 16*mib)
			d := attachLocked(t, filepath.Join(a, "img"), dio)
			if w := marker.Write(d.Path, 0, "A-before"); !w.OK() || !marker.Holds(t, img, 0, "A-before") {
				t.Fatalf("A's first write: %v", w)
			}
			fb, err := os.OpenFile(filepath.Join(b, "img"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fb.Close()
			if err := ofd(fb, unix.F_WRLCK); !errors.Is(err, unix.EAGAIN) {
				t.Fatalf("B before A dies: %v, want EAGAIN", errno.Name(err))
			}

			g.KillClient(t, "node-a")
			took, err := waitLock(fb, 60*time.Second)
			if err != nil {
				t.Fatalf("B's lock after A's client died: %v after %v", errno.Name(err), took)
			}
			t.Logf("B got the lock %v after A's client was killed", took.Round(10*time.Microsecond))
			if took > 2*time.Second {
				t.Errorf("B waited %v: the server no longer drops a dead client's locks at once", took)
			}
			w := marker.Write(d.Path, mib, "A-after-death")
			t.Logf("A's loop device write after its client died: %v", w)
			if w.OK() {
				t.Errorf("A's write after its client died succeeded")
			}
			if marker.Holds(t, img, mib, "A-after-death") {
				t.Errorf("A's write after its client died reached the image")
			}
		})
	}
}

// cutOffCase is one run of the cut-off experiment.
type cutOffCase struct {
	name string
	opts gluster.Options
	dio  bool
	// maxRelease bounds how long B may wait for the lock.
	maxRelease time.Duration
	// strict: client.strict-locks is on, and A's writes after the restore
	// are expected to fail; off, they are expected to reach the image.
	strict bool
	// restoreEarly brings A's link back as soon as B has the lock and has
	// written, before A's client has noticed the cut (its writes are still
	// pending on its old connection, which the server has closed).
	restoreEarly bool
}

// cutOffResult is what one run saw.
type cutOffResult struct {
	released        time.Duration // from the cut to B's granted lock
	during, afterB  marker.Result // A's writes: right after the cut; after B got the lock
	restore1        marker.Result // A's first write after the link came back and A's client reconnected
	restore2        marker.Result // and a second one 3 s later
	reconnected     time.Duration // from Restore until A's mount answered again
	reached         []string      // A's markers found in the image (on the brick)
	bStillOwns      bool          // B's lock still refused A's new open file after the restore
	aLockBack       bool          // after B unlocked, a third open file was refused (A's old lock came back)
	bWriteReachedOK bool
}

// runCutOff: A holds the image's lock through its loop device and writes a
// first marker; A is cut off; A writes (during); B waits for the lock;
// once B has it A writes again (afterB) and B writes its own marker; the
// link comes back, A's client reconnects, A writes twice more. Then the
// image on the brick tells which of A's writes reached it.
func runCutOff(t *testing.T, tc cutOffCase) cutOffResult {
	var r cutOffResult
	g := gluster.Start(t, tc.opts)
	a, b := g.MountNode(t, "node-a"), g.MountNode(t, "node-b")
	img := filepath.Join(g.BrickDir(), "img")
	newImage(t, filepath.Join(a, "img"), 16*mib)
	d := attachLocked(t, filepath.Join(a, "img"), tc.dio)
	if got := sysDIO(t, d); (got == "1") != tc.dio {
		t.Fatalf("dio = %s", got)
	}
	if w := marker.Write(d.Path, 0, "A0-before"); !w.OK() || !marker.Holds(t, img, 0, "A0-before") {
		t.Fatalf("A's first write: %v", w)
	}
	fb, err := os.OpenFile(filepath.Join(b, "img"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if err := ofd(fb, unix.F_WRLCK); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("B before the cut: %v, want EAGAIN", errno.Name(err))
	}

	g.CutOff(t, "node-a")
	cut := time.Now()
	during := marker.WriteAsync(d.Path, 1*mib, "A1-during-cut")
	took, err := waitLock(fb, tc.maxRelease)
	if err != nil {
		t.Fatalf("B's lock while A is cut off: %v after %v", errno.Name(err), took)
	}
	r.released = time.Since(cut)
	t.Logf("B got the lock %v after the cut", r.released.Round(time.Millisecond))
	afterB := marker.WriteAsync(d.Path, 2*mib, "A2-after-B-locked")
	if _, err := fb.WriteAt(marker.Of("B-owner"), 3*mib); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if err := fb.Sync(); err != nil {
		t.Fatalf("B's fsync: %v", err)
	}
	wait := func(ch <-chan marker.Result, what string) marker.Result {
		select {
		case w := <-ch:
			return w
		case <-time.After(5 * time.Minute):
			t.Fatalf("A's %s write still blocked after 5 min", what)
			return marker.Result{}
		}
	}
	if tc.restoreEarly {
		g.Restore(t, "node-a")
		t.Logf("link restored %v after the cut, A's writes still pending", time.Since(cut).Round(time.Millisecond))
	}
	r.during = wait(during, "during")
	t.Logf("A's write right after the cut: %v (returned %v after the cut)", r.during, time.Since(cut).Round(time.Millisecond))
	r.afterB = wait(afterB, "after-B")
	t.Logf("A's write after B got the lock: %v", r.afterB)

	if !tc.restoreEarly {
		g.Restore(t, "node-a")
	}
	restored := time.Now()
	for {
		if _, err := os.Stat(filepath.Join(a, "img")); err == nil {
			break
		}
		if time.Since(restored) > 2*time.Minute {
			t.Fatalf("A's mount does not answer 2 min after the restore")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.reconnected = time.Since(restored)
	t.Logf("A's mount answered %v after the restore", r.reconnected.Round(time.Millisecond))
	// Let the client's reconnect (fd reopen) finish: it follows the
	// handshake asynchronously.
	time.Sleep(2 * time.Second)
	r.restore1 = marker.Write(d.Path, 4*mib, "A3-after-restore")
	t.Logf("A's first write after the restore: %v", r.restore1)
	time.Sleep(3 * time.Second)
	r.restore2 = marker.Write(d.Path, 5*mib, "A4-later")
	t.Logf("A's second write after the restore: %v", r.restore2)

	for _, m := range []struct {
		off  int64
		text string
	}{{1 * mib, "A1-during-cut"}, {2 * mib, "A2-after-B-locked"}, {4 * mib, "A3-after-restore"}, {5 * mib, "A4-later"}} {
		if marker.Holds(t, img, m.off, m.text) {
			r.reached = append(r.reached, m.text)
		}
	}
	r.bWriteReachedOK = marker.Holds(t, img, 3*mib, "B-owner")
	t.Logf("A's writes in the image: %v; B's write there: %v", r.reached, r.bWriteReachedOK)

	// Locks after the restore: B's still refuses A (a new open file on A);
	// once B lets go, is A's old lock back (its loop device's file)?
	fa, err := os.OpenFile(filepath.Join(a, "img"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	r.bStillOwns = errors.Is(ofd(fa, unix.F_WRLCK), unix.EAGAIN)
	if err := ofd(fb, unix.F_UNLCK); err != nil {
		t.Fatal(err)
	}
	fc, err := os.OpenFile(filepath.Join(b, "img"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	r.aLockBack = errors.Is(ofd(fc, unix.F_WRLCK), unix.EAGAIN)
	t.Logf("after the restore: B's lock refuses A: %v; after B unlocked, A's old lock is back: %v", r.bStillOwns, r.aLockBack)
	_ = ofd(fc, unix.F_UNLCK)
	logClientLines(t, g)

	// What was seen on GlusterFS 10.3 / Linux 6.18, asserted.
	if r.released < time.Second {
		t.Errorf("B got the lock %v after the cut: the server dropped a silent client's lock at once", r.released)
	}
	for _, w := range []struct {
		name string
		w    marker.Result
	}{{"during the cut", r.during}, {"after B got the lock", r.afterB}} {
		if w.w.OK() || w.w.Write != nil || !errors.Is(w.w.Sync, unix.EIO) {
			t.Errorf("A's write %s: %v; seen before: pwrite ok (write-behind), fsync EIO", w.name, w.w)
		}
	}
	if tc.strict {
		if r.restore1.OK() || r.restore2.OK() || len(r.reached) != 0 {
			t.Errorf("strict-locks on: A's writes after the restore: %v / %v, reached %v; seen before: fsync EIO, nothing reached", r.restore1, r.restore2, r.reached)
		}
	} else {
		if !r.restore1.OK() || !r.restore2.OK() || strings.Join(r.reached, ",") != "A3-after-restore,A4-later" {
			t.Errorf("strict-locks off: A's writes after the restore: %v / %v, reached %v; seen before: both ok and in the image while B holds the lock", r.restore1, r.restore2, r.reached)
		}
	}
	if !r.bWriteReachedOK || !r.bStillOwns || r.aLockBack {
		t.Errorf("B's write reached: %v, B's lock refuses A after the restore: %v, A's lock came back: %v; seen before: true, true, false", r.bWriteReachedOK, r.bStillOwns, r.aLockBack)
	}
	return r
}

// logClientLines logs the lines of A's client log that tell about fds and
// locks across the reconnect.
func logClientLines(t *testing.T, g *gluster.Cluster) {
	b, err := os.ReadFile(filepath.Join(g.LogDir(), "client-node-a.log"))
	if err != nil {
		return
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "reopen") || strings.Contains(l, "lock") || strings.Contains(l, "EBADFD") ||
			strings.Contains(l, "bad fd") || strings.Contains(l, "ping_timer_expired") || strings.Contains(l, "disconnected") {
			if n < 25 {
				t.Logf("client-node-a.log: %s", l)
			}
			n++
		}
	}
}

// quickTimeouts make the server notice a silent client in seconds: TCP
// keepalive after 2 s idle, probes every 1 s, 3 of them, and a TCP user
// timeout of 5 s; the clients' ping timeout is 5 s.
var quickTimeouts = gluster.Options{
	PingTimeout: 5 * time.Second,
	Set: [][2]string{
		{"server.keepalive-time", "2"},
		{"server.keepalive-interval", "1"},
		{"server.keepalive-count", "3"},
		{"server.tcp-user-timeout", "5"},
	},
}

func withStrictLocks(o gluster.Options) gluster.Options {
	o.Set = append(append([][2]string(nil), o.Set...), [2]string{"client.strict-locks", "on"})
	return o
}

// TestClientCutOff runs the cut-off experiment with short timeouts: the
// server notices the silent client and drops its lock after ~5.5 s; A's
// writes during the cut fail at A's ping timeout (fsync EIO) and reach
// nothing; after the restore A's client reconnects in ~3 s, and then the
// default (client.strict-locks off) reopens A's fd without its lock: A's
// writes succeed and reach the image while B holds the lock. With
// client.strict-locks on they fail (EIO) and reach nothing. A's lock never
// comes back.
func TestClientCutOff(t *testing.T) {
	cases := []cutOffCase{
		{"dio1", quickTimeouts, true, 60 * time.Second, false, false},
		{"dio1-strict-locks", withStrictLocks(quickTimeouts), true, 60 * time.Second, true, false},
		{"dio1-strict-locks-restore-early", withStrictLocks(quickTimeouts), true, 60 * time.Second, true, true},
	}
	if long() {
		cases = append(cases,
			cutOffCase{"dio1-restore-early", quickTimeouts, true, 60 * time.Second, false, true},
			cutOffCase{"dio0", quickTimeouts, false, 60 * time.Second, false, false},
			cutOffCase{"dio0-strict-locks", withStrictLocks(quickTimeouts), false, 60 * time.Second, true, false})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCutOff(t, tc)
			t.Logf("result: %+v", r)
		})
	}
}

// TestClientCutOffDefaultTimeouts runs it with GlusterFS's default
// timeouts (-long).
func TestClientCutOffDefaultTimeouts(t *testing.T) {
	requireLong(t)
	for _, tc := range []cutOffCase{
		{"dio1", gluster.Options{}, true, 5 * time.Minute, false, false},
		{"dio1-strict-locks", withStrictLocks(gluster.Options{}), true, 5 * time.Minute, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCutOff(t, tc)
			t.Logf("result: %+v", r)
		})
	}
}

// TestClientCutOffBriefly: A is cut off for longer than its client's ping
// timeout (3 s here) but shorter than the server needs to notice (the
// server's defaults: TCP keepalive after 20 s idle, 9 probes 2 s apart,
// TCP user timeout 42 s). During the cut the server keeps A's lock (B is
// refused). A's client gives up its connection at 3 s and reconnects after
// the restore; the server then drops A's old connection and its locks: B
// gets the lock at once although A's loop device is still attached. With
// client.strict-locks off (the default) A's fd was reopened without its
// lock and A's writes reach the image after B took the lock; with it on,
// they fail (EIO; EBADFD inside the client) and reach nothing.
func TestClientCutOffBriefly(t *testing.T) {
	for _, strict := range []bool{false, true} {
		name := "strict-locks-off"
		opts := gluster.Options{PingTimeout: 3 * time.Second}
		if strict {
			name = "strict-locks-on"
			opts = withStrictLocks(opts)
		}
		t.Run(name, func(t *testing.T) {
			g := gluster.Start(t, opts)
			a, b := g.MountNode(t, "node-a"), g.MountNode(t, "node-b")
			img := filepath.Join(g.BrickDir(), "img")
			newImage(t, filepath.Join(a, "img"), 16*mib)
			d := attachLocked(t, filepath.Join(a, "img"), true)
			if w := marker.Write(d.Path, 0, "A0-before"); !w.OK() {
				t.Fatalf("A's first write: %v", w)
			}
			fb, err := os.OpenFile(filepath.Join(b, "img"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fb.Close()
			g.CutOff(t, "node-a")
			cut := time.Now()
			during := marker.WriteAsync(d.Path, 1*mib, "A1-during-cut")
			time.Sleep(7 * time.Second)
			if err := ofd(fb, unix.F_WRLCK); !errors.Is(err, unix.EAGAIN) {
				t.Fatalf("B's lock 7 s into the cut: %s, want EAGAIN (the server still holds A's)", errno.Name(err))
			}
			g.Restore(t, "node-a")
			w := <-during
			t.Logf("A's write during the cut: %v (returned %v after the cut)", w, time.Since(cut).Round(time.Millisecond))
			if w.OK() || marker.Holds(t, img, 1*mib, "A1-during-cut") {
				t.Errorf("A's write during the cut: %v, reached the image: %v; want EIO, not reached", w, marker.Holds(t, img, 1*mib, "A1-during-cut"))
			}
			restored := time.Now()
			for time.Since(restored) < 30*time.Second {
				if _, err := os.Stat(filepath.Join(a, "img")); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("A's mount answered %v after the restore", time.Since(restored).Round(time.Millisecond))
			took, err := waitLock(fb, 30*time.Second)
			if err != nil {
				t.Fatalf("B's lock after the restore: %s after %v", errno.Name(err), took)
			}
			t.Logf("B got the lock %v after the restore, A's loop device still attached", time.Since(restored).Round(time.Millisecond))
			time.Sleep(2 * time.Second) // the client's fd reopen follows its handshake
			w = marker.Write(d.Path, 2*mib, "A2-after-B-locked")
			reached := marker.Holds(t, img, 2*mib, "A2-after-B-locked")
			t.Logf("A's write after B got the lock: %v; reached the image: %v", w, reached)
			if strict && (w.OK() || reached) {
				t.Errorf("strict-locks on: A's write after B got the lock: %v, reached: %v; want EIO, not reached", w, reached)
			}
			if !strict && (!w.OK() || !reached) {
				t.Errorf("strict-locks off: A's write after B got the lock: %v, reached: %v; seen before: ok and reached (no fencing)", w, reached)
			}
			logClientLines(t, g)
		})
	}
}

// TestBrickRestart: the brick process crashes (SIGKILL) and is started
// again while A holds the image's lock through its loop device. The new
// brick knows no locks: B gets the lock as soon as it can reach the brick.
// A's client reconnects; with client.strict-locks off A's fd is reopened
// without its lock and A's writes reach the image while B holds the lock;
// with it on they fail (EIO) and reach nothing.
func TestBrickRestart(t *testing.T) {
	for _, strict := range []bool{false, true} {
		name := "strict-locks-off"
		opts := gluster.Options{PingTimeout: 5 * time.Second}
		if strict {
			name = "strict-locks-on"
			opts = withStrictLocks(opts)
		}
		t.Run(name, func(t *testing.T) {
			g := gluster.Start(t, opts)
			a, b := g.MountNode(t, "node-a"), g.MountNode(t, "node-b")
			img := filepath.Join(g.BrickDir(), "img")
			newImage(t, filepath.Join(a, "img"), 16*mib)
			d := attachLocked(t, filepath.Join(a, "img"), true)
			if w := marker.Write(d.Path, 0, "A0-before"); !w.OK() {
				t.Fatalf("A's first write: %v", w)
			}
			fb, err := os.OpenFile(filepath.Join(b, "img"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fb.Close()
			if err := ofd(fb, unix.F_WRLCK); !errors.Is(err, unix.EAGAIN) {
				t.Fatalf("B before the restart: %s, want EAGAIN", errno.Name(err))
			}
			start := time.Now()
			g.RestartBrick(t)
			t.Logf("brick restarted in %v", time.Since(start).Round(time.Millisecond))
			// B's open file is not usable until B's client has reconnected
			// (EBADFD, ENOTCONN): B tries through new open files.
			var seen []string
			for {
				f, err := os.OpenFile(filepath.Join(b, "img"), os.O_RDWR, 0)
				if err == nil {
					err = ofd(f, unix.F_WRLCK)
					if err == nil {
						defer f.Close()
						break
					}
					f.Close()
				}
				if n := errno.Name(err); len(seen) == 0 || seen[len(seen)-1] != n {
					seen = append(seen, n)
				}
				if time.Since(start) > 60*time.Second {
					t.Fatalf("B's lock after the brick restart: %v for 60 s", seen)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("B got the lock %v after the brick was killed (errors before: %v), A's loop device still attached", time.Since(start).Round(time.Millisecond), seen)
			// Let A's client reconnect and reopen what it reopens.
			for time.Since(start) < 30*time.Second {
				if _, err := os.Stat(filepath.Join(a, "img")); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(2 * time.Second)
			w := marker.Write(d.Path, 2*mib, "A2-after-B-locked")
			reached := marker.Holds(t, img, 2*mib, "A2-after-B-locked")
			t.Logf("A's write after B got the lock: %v; reached the image: %v", w, reached)
			if strict && (w.OK() || reached) {
				t.Errorf("strict-locks on: A's write after B got the lock: %v, reached: %v; want EIO, not reached", w, reached)
			}
			if !strict && (!w.OK() || !reached) {
				t.Errorf("strict-locks off: A's write after B got the lock: %v, reached: %v; seen before: ok and reached (no fencing)", w, reached)
			}
			logClientLines(t, g)
		})
	}
}
