package ceph_test

import (
	"flag"
	"testing"
	"time"

	"github.com/filevol/filevol/test/marker"
)

var long = flag.Bool("long", false, "run the fencing proofs that wait for the MDS's own timeouts (minutes): make ceph-fencing")

// writingOnNodeA starts an image pool with node-a and node-b, attaches a
// new 64 MiB block volume to node-a and has node-a's pod write its first
// marker: where each long proof starts, before node-a is lost.
func writingOnNodeA(t *testing.T, volume string) (ip *imagePool, a, b *imgNode, id string) {
	t.Helper()
	ip = newImagePool(t, "node-a", "node-b")
	a, b = ip.nodes["node-a"], ip.nodes["node-b"]
	id = ip.create(volume, blockVC, 64<<20, nil).GetVolumeId()
	a.attach(id, blockVC)
	if w := marker.Write(a.Target, marker.Block(0), "before"); !w.OK() {
		t.Fatalf("node-a's write: %v", w)
	}
	return ip, a, b, id
}

// writeWithin is marker.Write, given up on (its goroutine left waiting)
// after d: a write through a cut-off client waits for it.
func writeWithin(dev string, blk int64, text string, d time.Duration) (marker.Result, bool) {
	done := marker.WriteAsync(dev, marker.Block(blk), text)
	select {
	case w := <-done:
		return w, true
	case <-time.After(d):
		return marker.Result{}, false
	}
}

// TestImagePoolFenceLong: the fence on CephFS when nobody evicts the old
// node's client, with the MDS's default timeouts (session_timeout 60 s,
// session_autoclose 300 s). Minutes long: make ceph-fencing.
//
//   - killed: node-a's ceph-fuse is killed while its device holds the
//     image; the force-detach and node-b's attach wait for the MDS to
//     give up on the dead client.
//   - cut-off: node-a's link to the cluster goes down while its pod
//     writes; node-b is attached once the MDS has dropped node-a's lock;
//     when the link comes back nothing node-a wrote after that reaches
//     the image (read by a client of its own).
func TestImagePoolFenceLong(t *testing.T) {
	if !*long {
		t.Skip("minutes long: make ceph-fencing (go test ./test/ceph -run FenceLong -args -long)")
	}
	t.Run("killed", func(t *testing.T) {
		ip, a, b, id := writingOnNodeA(t, "killed")
		ip.c.KillClient(t, "node-a")
		killed := time.Now()
		ip.unpublish(id, "node-a")
		t.Logf("force-detach of node-a returned %v after its client was killed", time.Since(killed).Round(time.Millisecond))
		pc, refusals, _ := ip.attachWhenAllowed(id, "node-b", 400*time.Second)
		t.Logf("node-b attached %v after node-a's client was killed (%d fencing refusals)", time.Since(killed).Round(time.Millisecond), refusals)
		b.Use(t, id, blockVC, pc)
		if !marker.Holds(t, b.Target, marker.Block(0), "before") {
			t.Error("node-b does not read node-a's data")
		}
		w, ok := writeWithin(a.Target, 1, "a-after", 10*time.Second)
		t.Logf("node-a's write on its dead client after node-b attached: %v (returned: %v)", w, ok)
		if marker.Holds(t, ip.image(id), marker.Block(1), "a-after") {
			t.Error("node-a's write reached the image")
		}
		b.detach(id)
	})
	t.Run("cut-off", func(t *testing.T) {
		ip, a, b, id := writingOnNodeA(t, "cut")
		ip.c.CutOff(t, "node-a")
		cut := time.Now()
		during := marker.WriteAsync(a.Target, marker.Block(1), "a-during-cut")
		ip.unpublish(id, "node-a")
		t.Logf("force-detach of node-a returned %v after the cut", time.Since(cut).Round(time.Millisecond))
		pc, refusals, _ := ip.attachWhenAllowed(id, "node-b", 400*time.Second)
		t.Logf("node-b attached %v after the cut (%d fencing refusals)", time.Since(cut).Round(time.Millisecond), refusals)
		b.Use(t, id, blockVC, pc)
		if w := marker.Write(b.Target, marker.Block(100), "b"); !w.OK() {
			t.Fatalf("node-b's write: %v", w)
		}
		after := marker.WriteAsync(a.Target, marker.Block(2), "a-after-b-attached")
		ip.c.Restore(t, "node-a")
		restored := time.Now()
		time.Sleep(20 * time.Second)
		healed, returned := writeWithin(a.Target, 3, "a-after-heal", 30*time.Second)
		for name, ch := range map[string]<-chan marker.Result{"during the cut": during, "after node-b attached": after} {
			select {
			case w := <-ch:
				t.Logf("node-a's write %s: %v", name, w)
			case <-time.After(time.Second):
				t.Logf("node-a's write %s: still waiting %v after the link came back", name, time.Since(restored).Round(time.Second))
			}
		}
		t.Logf("node-a's write 20 s after the link came back: %v (returned: %v)", healed, returned)
		time.Sleep(5 * time.Second)
		for blk, text := range map[int64]string{1: "a-during-cut", 2: "a-after-b-attached", 3: "a-after-heal"} {
			if marker.Holds(t, ip.image(id), marker.Block(blk), text) {
				t.Errorf("node-a's write %q reached the image node-b holds", text)
			}
		}
		if !marker.Holds(t, ip.image(id), marker.Block(100), "b") || !marker.Holds(t, b.Target, marker.Block(0), "before") {
			t.Error("the image lacks node-b's write or node-a's data from before the cut")
		}
		t.Logf("blocklist after the heal: %s", ip.c.Ceph(t, "osd", "blocklist", "ls"))
		b.detach(id)
	})
}
