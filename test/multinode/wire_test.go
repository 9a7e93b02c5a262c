package multinode

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil/gluster"
	"github.com/filevol/filevol/test/marker"
	"github.com/filevol/filevol/test/wire"
)

// TestSharedPoolTrafficOnTheWire: a random marker written by a "pod"
// through a block volume of a shared pool on GlusterFS (controller
// attaches, node stages and publishes, the marker goes O_DIRECT through
// the loop device on the image in the node's FUSE mount, and is fsynced)
// is captured on the server's bridge, where every packet between the
// nodes' clients and the server passes (wire: an AF_PACKET socket in the
// server's namespace, started before any client connects).
//
//   - tls (client.ssl, server.ssl on; certificates made by the harness):
//     the marker is in no captured payload, the brick's connections parse
//     from their first byte as TLS records carrying application data, and
//     the capture dropped nothing (else an absence would prove nothing);
//   - clear (GlusterFS's default): the marker crosses in a connection to
//     the brick's port, which does not parse as TLS: the check above can
//     fail.
//
// In both the marker is read back from the image on the brick, so it did
// cross. Attach+stage times are logged (with and without TLS).
func TestSharedPoolTrafficOnTheWire(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := map[bool]string{false: "clear", true: "tls"}[tls]
		t.Run(name, func(t *testing.T) {
			var capture *wire.Capture
			var stopOnce sync.Once
			var res wire.Result
			var stopErr error
			stop := func() { stopOnce.Do(func() { res, stopErr = capture.Stop() }) }
			c := newClusterWith(t, clusterOptions{backend: "gluster", strict: true, tls: tls, started: func(g *gluster.Cluster) {
				var err error
				if capture, err = wire.Start(g.ServerNetns(), "br0"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(stop)
			}}, "node-a")
			if c.g.TLS() != tls {
				t.Fatalf("volume TLS %v, want %v", c.g.TLS(), tls)
			}
			id := c.create("wire-"+name, blockCap)
			a := c.nodes["node-a"]
			begin := time.Now()
			pc := c.mustPublish(id, "node-a", blockCap)
			a.Use(t, id, blockCap, pc)
			attachStage := time.Since(begin)

			text := "fvwire-" + randomHex(t)
			if w := marker.Write(a.Target, marker.Block(5), text); !w.OK() {
				t.Fatalf("marker through %s: %v", a.Target, w)
			}
			if !marker.Holds(t, c.image(id), marker.Block(5), text) {
				t.Fatalf("marker not in the image on the brick %s: it did not cross", c.image(id))
			}
			a.Release(t, id)
			c.unpublish(id, "node-a")
			port := uint16(c.g.BrickPort(t))
			stop()
			if stopErr != nil {
				t.Fatalf("capture: %v", stopErr)
			}
			found := res.Contains([]byte(text))
			recs := res.TLS(port)
			t.Logf("%s: attach+stage+publish %v; captured %d frames, %d payload bytes, dropped %d; marker in %v",
				name, attachStage.Round(time.Millisecond), res.Packets, res.Bytes, res.Dropped, found)
			for _, r := range recs {
				t.Logf("brick port %d: %v", port, r)
			}
			if len(recs) == 0 {
				t.Fatalf("no payload to or from the brick's port %d was captured", port)
			}
			if !tls {
				toBrick := false
				for _, f := range found {
					toBrick = toBrick || f.DstPort == port
				}
				if !toBrick {
					t.Fatalf("without TLS the marker was not seen going to the brick's port %d (found in %v): the capture would not see a leak", port, found)
				}
				for _, r := range recs {
					if r.IsTLS() {
						t.Errorf("without TLS, %v parses as TLS", r)
					}
				}
				return
			}
			if res.Dropped != 0 {
				t.Fatalf("the capture dropped %d bytes: the marker's absence would prove nothing", res.Dropped)
			}
			if len(found) != 0 {
				t.Errorf("with TLS the marker crossed in clear in %v", found)
			}
			for _, r := range recs {
				if !r.IsTLS() {
					t.Errorf("with TLS, not TLS records: %v", r)
				}
			}
		})
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
