package multinode

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
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
	a.use(id, blockCap, c.mustPublish(id, "node-a", blockCap))
	if w := writeMarker(a.target, 0, "before"); !w.ok() {
		t.Fatalf("node-a's first write: %v", w)
	}
	if !holdsMarker(t, c.image(id), 0, "before") {
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
		if !isFenced(err) {
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

// refusedWhileWriting asks for node-b's attachment n times while node-a
// writes between the tries: every try must be refused by fencing, and
// every write of A must succeed and reach the image (A can write, so B
// must wait). blk is the first block A writes.
func refusedWhileWriting(t *testing.T, c *cluster, id string, a *node, n int, blk int64) int64 {
	t.Helper()
	for i := range n {
		_, err := c.publish(id, "node-b", blockCap)
		if !isFenced(err) {
			t.Fatalf("ControllerPublishVolume to node-b while node-a's device holds the image (try %d): %v; want the fencing refusal", i, err)
		}
		text := fmt.Sprintf("a-while-fenced-%d", i)
		if w := writeMarker(a.target, blk, text); !w.ok() {
			t.Fatalf("node-a's write while B is refused: %v", w)
		}
		if !holdsMarker(t, c.image(id), blk, text) {
			t.Fatalf("node-a's write %q is not in the image", text)
		}
		blk++
	}
	return blk
}

// TestFencingNodeDead: node A dies (its filevol killed; on GlusterFS its
// client too, so its mount is gone) while its loop device holds the
// volume. Kubernetes force-detaches it.
//
//   - gluster: the brick drops a dead client's locks at once, so B is
//     attached; A's device (which a dead host would not even have) fails
//     every later write, and none reaches the image; B has A's data.
//   - local: A's kernel objects outlive its processes on one host, so B is
//     refused for as long as A's device exists and A's writes land; once
//     they are gone (the host's death), B is attached with all of A's data.
func TestFencingNodeDead(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b")
			id, a, b := fenceSetup(t, c)
			a.kill()
			if c.g != nil {
				c.g.KillClient(t, "node-a")
			}
			c.unpublish(id, "node-a") // the force-detach
			next := int64(1)
			if c.g == nil {
				next = refusedWhileWriting(t, c, id, a, 3, next)
				c.cleanNode(a) // the host dies: its mounts and loop device go
			}
			pc, fenced := attachWhenAllowed(t, c, id, "node-b", 30*time.Second, nil)
			t.Logf("%s: node-b attached after %d fencing refusals", backend, fenced)
			b.use(id, blockCap, pc)
			if c.g != nil {
				for i := range 3 {
					text := fmt.Sprintf("a-after-%d", i)
					w := writeMarker(a.target, next+int64(i), text)
					t.Logf("dead node-a writes %q after node-b attached: %v", text, w)
					if w.ok() {
						t.Errorf("dead node-a's write %q succeeded after node-b attached", text)
					}
					if holdsMarker(t, c.image(id), next+int64(i), text) {
						t.Errorf("dead node-a's write %q reached the image after node-b attached", text)
					}
				}
			}
			if !holdsMarker(t, b.target, 0, "before") {
				t.Error("node-b does not read node-a's data")
			}
			for blk := int64(1); blk < next; blk++ {
				if !holdsMarker(t, b.target, blk, fmt.Sprintf("a-while-fenced-%d", blk-1)) {
					t.Errorf("node-b does not read node-a's write %d of the fenced time", blk)
				}
			}
			if w := writeMarker(b.target, 100, "b"); !w.ok() || !holdsMarker(t, c.image(id), 100, "b") {
				t.Errorf("node-b's write: %v, or not in the image", w)
			}
			b.release(id)
			c.unpublish(id, "node-b")
		})
	}
}

// TestFencingNodeFilevolKilledWhileWriting: A's filevol is killed while a
// pod keeps writing through A's loop device, which the kernel keeps
// without filevol. Kubernetes force-detaches A. On both filesystems A's
// client is alive, the device holds the image's lock, and B's attach is
// refused for as long as the writer writes; when A's filevol is back and
// kubelet unstages, B is attached with every byte the writer wrote.
func TestFencingNodeFilevolKilledWhileWriting(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b")
			id, a, b := fenceSetup(t, c)
			w := startWriter(a.target, 10)
			w.waitWrites(t, 3)
			a.kill()
			c.unpublish(id, "node-a")
			for i := range 5 {
				before := w.count()
				_, err := c.publish(id, "node-b", blockCap)
				if !isFenced(err) {
					t.Fatalf("ControllerPublishVolume to node-b while node-a's pod writes (try %d): %v; want the fencing refusal", i, err)
				}
				w.waitWrites(t, before+2) // the writer goes on
			}
			done := w.stop(t)
			a.restart()
			a.release(id) // kubelet, once A's filevol is back
			pc, fenced := attachWhenAllowed(t, c, id, "node-b", 10*time.Second, nil)
			if fenced != 0 {
				t.Errorf("node-b fenced %d times after node-a unstaged", fenced)
			}
			b.use(id, blockCap, pc)
			for i, text := range done {
				if !holdsMarker(t, b.target, 10+int64(i), text) {
					t.Fatalf("node-b lacks the writer's write %d (%q)", i, text)
				}
			}
			t.Logf("%s: %d writes of node-a's pod, all on node-b", backend, len(done))
			b.release(id)
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
	failed blockWrite
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
			r := writeMarker(dev, first+int64(i%200), text)
			w.mu.Lock()
			if !r.ok() {
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
	if w.failed.write != nil || w.failed.sync != nil {
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
