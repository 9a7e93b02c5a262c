package multinode

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/test/kubesim"
	"github.com/filevol/filevol/test/marker"
)

// Fencing: once a volume is force-detached from node A (Kubernetes does it
// for a node it cannot reach), B may have it only when nothing A still
// does can reach the image. Each test proves one of:
//
//   - B's attach is refused for as long as A can still write;
//   - once B is attached, not one byte A writes afterwards reaches the
//     image (read from the storage itself: the pool directory, or the
//     brick).
//
// The volume is a block volume: A's "pod" writes 4 KiB markers through the
// device it was given, so what each write got and where it landed is exact.

// fenceSetup makes a block volume, attaches it to node-a, which writes
// the marker "before" at block 0 and checks it reached the storage.
func fenceSetup(t *testing.T, c *cluster) (id string, a, b *node) {
	t.Helper()
	a, b = c.nodes["node-a"], c.nodes["node-b"]
	id = c.create("fenced", blockCap)
	a.Use(t, id, blockCap, c.mustPublish(id, "node-a", blockCap))
	if w := marker.Write(a.Target, marker.Block(0), "before"); !w.OK() {
		t.Fatalf("node-a's first write: %v", w)
	}
	if !marker.Holds(t, c.image(id), marker.Block(0), "before") {
		t.Fatal("node-a's first write is not in the image in the storage")
	}
	return id, a, b
}

// attachWhenAllowed asks for node's attachment until the controller stops
// refusing it because another node's device holds the image, at most
// limit; it returns the publish_context and how many times it was fenced.
// Any other refusal fails the test.
func attachWhenAllowed(t *testing.T, c *cluster, id, node string, limit time.Duration, between func()) (map[string]string, int) {
	t.Helper()
	fenced := 0
	for end := time.Now().Add(limit); ; {
		pc, err := c.publish(id, node, blockCap)
		if err == nil {
			return pc, fenced
		}
		if !kubesim.IsFencingRefusal(err) {
			t.Fatalf("ControllerPublishVolume to %s: %v; want success or the fencing refusal", node, err)
		}
		fenced++
		if time.Now().After(end) {
			t.Fatalf("ControllerPublishVolume to %s still fenced after %v (%d refusals): %v", node, limit, fenced, err)
		}
		if between != nil {
			between()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lateWritesFenced: node a, fenced (dead, evicted, blocklisted: how),
// writes 3 markers from block first on after node-b attached; each must
// fail and none reach the image.
func lateWritesFenced(t *testing.T, c *cluster, id string, a *node, first int64, how string) {
	t.Helper()
	for i := range 3 {
		text := fmt.Sprintf("a-after-%d", i)
		w := marker.Write(a.Target, marker.Block(first+int64(i)), text)
		t.Logf("%s node-a writes %q after node-b attached: %v", how, text, w)
		if w.OK() {
			t.Errorf("%s node-a's write %q succeeded after node-b attached", how, text)
		}
		if marker.Holds(t, c.image(id), marker.Block(first+int64(i)), text) {
			t.Errorf("%s node-a's write %q reached the image after node-b attached", how, text)
		}
	}
}

// refusedWhileWriting asks for node-b's attachment n times while node-a
// writes between the tries: every try must be refused by fencing, and
// every write of A must succeed and reach the image (A can write, so B
// must wait). blk is the first block A writes.
func refusedWhileWriting(t *testing.T, c *cluster, id string, a *node, n int, blk int64) int64 {
	t.Helper()
	for i := range n {
		_, err := c.publish(id, "node-b", blockCap)
		if !kubesim.IsFencingRefusal(err) {
			t.Fatalf("ControllerPublishVolume to node-b while node-a's device holds the image (try %d): %v; want the fencing refusal", i, err)
		}
		text := fmt.Sprintf("a-while-fenced-%d", i)
		if w := marker.Write(a.Target, marker.Block(blk), text); !w.OK() {
			t.Fatalf("node-a's write while B is refused: %v", w)
		}
		if !marker.Holds(t, c.image(id), marker.Block(blk), text) {
			t.Fatalf("node-a's write %q is not in the image", text)
		}
		blk++
	}
	return blk
}

// TestFencingNodeDead: node A dies (its filevol killed; on GlusterFS and
// CephFS its client too, so its mount is gone) while its loop device
// holds the volume. Kubernetes force-detaches it.
//
//   - gluster: the brick drops a dead client's locks at once, so B is
//     attached; A's device (which a dead host would not even have) fails
//     every later write, and none reaches the image; B has A's data.
//   - ceph: the MDS keeps a dead client, and its lock, until it gives up
//     on it (about 65 s: test/ceph's TestImagePoolFenceLong); the test,
//     as the cluster's admin, evicts it before the force-detach, as an
//     operator does (the controller's own eviction:
//     fencing_evict_test.go). Then as on gluster.
//   - local: A's kernel objects outlive its processes on one host, so B is
//     refused for as long as A's device exists and A's writes land; once
//     they are gone (the host's death), B is attached with all of A's data.
func TestFencingNodeDead(t *testing.T) {
	for _, backend := range fenceBackends() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b")
			id, a, b := fenceSetup(t, c)
			a.kill()
			if c.g != nil {
				c.g.KillClient(t, "node-a")
			}
			killed := time.Now()
			if c.cph != nil {
				c.cph.KillClient(t, "node-a")
				s := c.evict("node-a")
				t.Logf("ceph: node-a's dead client %d (%s) evicted %v after the kill", s.ID, s.Addr, time.Since(killed).Round(time.Millisecond))
			}
			c.unpublish(id, "node-a") // the force-detach
			next := int64(1)
			if c.g == nil && c.cph == nil {
				next = refusedWhileWriting(t, c, id, a, 3, next)
				c.cleanNode(a) // the host dies: its mounts and loop device go
			}
			pc, fenced := attachWhenAllowed(t, c, id, "node-b", 30*time.Second, nil)
			t.Logf("%s: node-b attached %v after node-a died, after %d fencing refusals", backend, time.Since(killed).Round(time.Millisecond), fenced)
			b.Use(t, id, blockCap, pc)
			if c.g != nil || c.cph != nil {
				lateWritesFenced(t, c, id, a, next, "dead")
			}
			if !marker.Holds(t, b.Target, marker.Block(0), "before") {
				t.Error("node-b does not read node-a's data")
			}
			for blk := int64(1); blk < next; blk++ {
				if !marker.Holds(t, b.Target, marker.Block(blk), fmt.Sprintf("a-while-fenced-%d", blk-1)) {
					t.Errorf("node-b does not read node-a's write %d of the fenced time", blk)
				}
			}
			if w := marker.Write(b.Target, marker.Block(100), "b"); !w.OK() || !marker.Holds(t, c.image(id), marker.Block(100), "b") {
				t.Errorf("node-b's write: %v, or not in the image", w)
			}
			b.Release(t, id)
			c.unpublish(id, "node-b")
		})
	}
}

// TestFencingNodeFilevolKilledWhileWriting: A's filevol is killed while a
// pod keeps writing through A's loop device, which the kernel keeps
// without filevol. Kubernetes force-detaches A. On every filesystem A's
// client is alive, the device holds the image's lock, and B's attach is
// refused for as long as the writer writes; when A's filevol is back and
// kubelet unstages, B is attached with every byte the writer wrote. B's
// node refuses to stage even on a record that attaches it (the node's own
// fence: its device cannot take the image's lock).
func TestFencingNodeFilevolKilledWhileWriting(t *testing.T) {
	for _, backend := range fenceBackends() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b")
			id, a, b := fenceSetup(t, c)
			w := startWriter(a.Target, 10)
			w.waitWrites(t, 3)
			a.kill()
			c.unpublish(id, "node-a")
			for i := range 5 {
				before := w.count()
				_, err := c.publish(id, "node-b", blockCap)
				if !kubesim.IsFencingRefusal(err) {
					t.Fatalf("ControllerPublishVolume to node-b while node-a's pod writes (try %d): %v; want the fencing refusal", i, err)
				}
				w.waitWrites(t, before+2) // the writer goes on
			}
			// The node's own fence, should a controller attach B anyway (an
			// older controller, a record written by hand): B's stage cannot
			// take the image's lock while A's device holds it.
			forged, err := attach.New(c.ctrlPool).Attach(attach.Request{VolumeID: id, Node: "node-b", SingleNode: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = b.Stage(id, blockCap, map[string]string{"filevol.csi.io/node": "node-b", pcEpoch: fmt.Sprint(forged.Epoch)})
			wantCode(t, "NodeStageVolume on node-b, attached by a forged record while node-a's pod writes", err, codes.FailedPrecondition, "still holds the image")
			if err := attach.New(c.ctrlPool).Detach(id, "node-b"); err != nil {
				t.Fatal(err)
			}
			w.waitWrites(t, w.count()+2)
			done := w.stop(t)
			a.restart()
			a.Release(t, id) // kubelet, once A's filevol is back
			pc, fenced := attachWhenAllowed(t, c, id, "node-b", 10*time.Second, nil)
			if fenced != 0 {
				t.Errorf("node-b fenced %d times after node-a unstaged", fenced)
			}
			b.Use(t, id, blockCap, pc)
			for i, text := range done {
				if !marker.Holds(t, b.Target, marker.Block(10+int64(i)), text) {
					t.Fatalf("node-b lacks the writer's write %d (%q)", i, text)
				}
			}
			t.Logf("%s: node-a's pod wrote %d times while node-b was refused; the last write of each of its %d blocks is on node-b", backend, w.count(), len(done))
			b.Release(t, id)
			c.unpublish(id, "node-b")
		})
	}
}

// writer is a pod on A writing marker after marker to consecutive blocks
// of its device, as long as its writes succeed.
type writer struct {
	mu     sync.Mutex
	total  int      // successful writes
	ok     []string // what each block holds, from the first
	failed marker.Result
	quit   chan struct{}
	ended  chan struct{}
}

func startWriter(dev string, first int64) *writer {
	w := &writer{quit: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			text := fmt.Sprintf("pod-write-%d", i)
			r := marker.Write(dev, marker.Block(first+int64(i%200)), text)
			w.mu.Lock()
			if !r.OK() {
				w.failed = r
				w.mu.Unlock()
				return
			}
			w.total++
			if i < 200 {
				w.ok = append(w.ok, text)
			} else {
				w.ok[i%200] = text
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// waitWrites waits until n writes succeeded in all; a writer that stops
// on a failed write fails the test.
func (w *writer) waitWrites(t *testing.T, n int) {
	t.Helper()
	for w.count() < n {
		select {
		case <-w.ended:
			t.Fatalf("the pod's writer stopped: %v", w.failed)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stop ends the writer and returns what each block it wrote holds.
func (w *writer) stop(t *testing.T) []string {
	close(w.quit)
	<-w.ended
	if w.failed.Write != nil || w.failed.Sync != nil {
		t.Fatalf("the pod's writer failed: %v", w.failed)
	}
	return w.ok
}

// cleanNode removes node's mounts and its loop devices, as the death of
// its host does (its filevol is dead: nothing unstages).
func (c *cluster) cleanNode(n *node) {
	c.t.Helper()
	c.unmountUnder(n.kubelet)
	for _, d := range c.loops() {
		if err := loop.DetachFile(d.BackingFile); err != nil {
			c.t.Fatalf("detach %s: %v", d.Path, err)
		}
	}
}

// TestFencingNodePartitioned: node A is cut off (from the API server, and
// on GlusterFS from the pool's server too: its veth goes down) but still
// mounts the pool, its pod still writing; Kubernetes force-detaches it.
//
//   - gluster, client.strict-locks on: B is refused until the server has
//     expired A's connection and its lock (~5 s with the test's timeouts,
//     42 s with GlusterFS's defaults); once B is attached, none of A's
//     writes reaches the brick, neither during the cut nor after the link
//     is back (A's client does not reopen the locked fd).
//   - gluster, strict-locks off (GlusterFS's default): the same until the
//     link is back; then A's client reopens its fd without the lock and A's
//     writes land in the image B holds. Fencing does NOT hold; the test
//     shows it, and docs/shared-pools-glusterfs.md says so.
//   - ceph: A's client is evicted (partitionedCeph); nothing A writes
//     after that reaches the image, during the cut or after it.
//   - local: there is no network to cut: A can write for as long as its
//     device exists, and B is refused for as long; when A's kubelet
//     unstages (the partition healed), B is attached with A's data.
func TestFencingNodePartitioned(t *testing.T) {
	cases := []struct {
		name    string
		backend string
		strict  bool
	}{
		{"local", "local", true},
		{"gluster", "gluster", true},
		{"gluster-strict-locks-off", "gluster", false},
	}
	if *withCeph {
		cases = append(cases, struct {
			name    string
			backend string
			strict  bool
		}{"ceph", "ceph", true})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.backend, tc.strict, "node-a", "node-b")
			id, a, b := fenceSetup(t, c)
			if c.cph != nil {
				partitionedCeph(t, c, id, a, b)
				return
			}
			if c.g == nil {
				c.unpublish(id, "node-a")
				next := refusedWhileWriting(t, c, id, a, 5, 1)
				a.Release(t, id)
				pc, fenced := attachWhenAllowed(t, c, id, "node-b", 10*time.Second, nil)
				if fenced != 0 {
					t.Errorf("node-b fenced %d times after node-a unstaged", fenced)
				}
				b.Use(t, id, blockCap, pc)
				for blk := int64(0); blk < next; blk++ {
					text := "before"
					if blk > 0 {
						text = fmt.Sprintf("a-while-fenced-%d", blk-1)
					}
					if !marker.Holds(t, b.Target, marker.Block(blk), text) {
						t.Errorf("node-b lacks node-a's block %d (%q)", blk, text)
					}
				}
				b.Release(t, id)
				c.unpublish(id, "node-b")
				return
			}
			partitioned(t, c, id, a, b, tc.strict)
		})
	}
}

// partitioned runs the GlusterFS half of TestFencingNodePartitioned.
func partitioned(t *testing.T, c *cluster, id string, a, b *node, strict bool) {
	c.g.CutOff(t, "node-a")
	cut := time.Now()
	c.unpublish(id, "node-a") // the force-detach
	// A's pod writes during the cut; on a cut link they hang until A's
	// client gives up (twice its ping timeout).
	during := marker.WriteAsync(a.Target, marker.Block(1), "a-during-cut")
	pc, fenced := attachWhenAllowed(t, c, id, "node-b", 60*time.Second, nil)
	t.Logf("node-b attached %v after the cut, after %d fencing refusals", time.Since(cut).Round(100*time.Millisecond), fenced)
	if fenced == 0 {
		t.Error("node-b was attached at once: the server cannot have expired node-a's lock yet")
	}
	b.Use(t, id, blockCap, pc)
	if w := marker.Write(b.Target, marker.Block(100), "b"); !w.OK() {
		t.Fatalf("node-b's write: %v", w)
	}
	after := marker.WriteAsync(a.Target, marker.Block(2), "a-after-b-attached")

	c.g.Restore(t, "node-a")
	// A's client reconnects about 3 s after the link is back; a write made
	// then is the one that strict-locks decides.
	reconnected := false
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if _, err := os.Stat(a.pool); err == nil {
			reconnected = true
			break
		}
	}
	if !reconnected {
		t.Fatal("node-a's client did not answer within 30 s of the link coming back")
	}
	time.Sleep(4 * time.Second) // past the reconnect, which a stat can beat
	healed := marker.Write(a.Target, marker.Block(3), "a-after-heal")
	t.Logf("node-a's writes: during the cut %v; after B attached %v; after the link came back %v", <-during, <-after, healed)

	for blk, text := range map[int64]string{1: "a-during-cut", 2: "a-after-b-attached"} {
		if marker.Holds(t, c.image(id), marker.Block(blk), text) {
			t.Errorf("node-a's write %q reached the brick", text)
		}
	}
	reached := marker.Holds(t, c.image(id), marker.Block(3), "a-after-heal")
	switch {
	case strict && (reached || healed.OK()):
		t.Errorf("strict-locks on: node-a's write after the link came back got %v and reached the brick: %v; want refused", healed, reached)
	case !strict && !reached:
		t.Errorf("strict-locks off: node-a's write after the link came back (%v) did not reach the brick; measured before: it does (its fd reopened without the lock). If GlusterFS changed, update docs/shared-pools-glusterfs.md", healed)
	case !strict:
		t.Logf("strict-locks off: node-a's write after the link came back reached the image node-b holds: fencing does not hold")
	}
	if !marker.Holds(t, c.image(id), marker.Block(100), "b") {
		t.Error("node-b's write is not in the brick")
	}
	if !marker.Holds(t, b.Target, marker.Block(0), "before") {
		t.Error("node-b does not read node-a's data from before the cut")
	}
	b.Release(t, id)
	c.unpublish(id, "node-b")
}
