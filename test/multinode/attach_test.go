package multinode

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestAttachDetachAcrossNodes: one ext4 volume of a shared pool moves
// node-a → node-b → node-c, each time detached from the last node and
// attached to the next, with every byte written before; while one node has
// it, the others are refused (Multi-Attach: FAILED_PRECONDITION naming the
// node), at ControllerPublishVolume and at NodeStageVolume with another
// node's publish_context.
func TestAttachDetachAcrossNodes(t *testing.T) {
	for _, backend := range backendsWithCeph() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b", "node-c")
			id := c.create("moves", ext4Cap)
			order := []string{"node-a", "node-b", "node-c"}
			var written [][]byte
			for i, name := range order {
				n := c.nodes[name]
				begin := time.Now()
				pc := c.mustPublish(id, name, ext4Cap)
				attach := time.Since(begin)
				if again := c.mustPublish(id, name, ext4Cap); again[pcEpoch] != pc[pcEpoch] {
					t.Fatalf("repeated ControllerPublishVolume to %s: epoch %s, first %s", name, again[pcEpoch], pc[pcEpoch])
				}
				for _, other := range order {
					if other == name {
						continue
					}
					_, err := c.publish(id, other, ext4Cap)
					wantCode(t, "ControllerPublishVolume to "+other+" while "+name+" has it", err, codes.FailedPrecondition, "attached to node "+name)
					err = c.nodes[other].Stage(id, ext4Cap, pc)
					wantCode(t, "NodeStageVolume on "+other+" with "+name+"'s publish_context", err, codes.FailedPrecondition, "for node "+name)
				}
				got, err := c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
				if err != nil || !slices.Equal(got.GetStatus().GetPublishedNodeIds(), []string{name}) {
					t.Fatalf("ControllerGetVolume: published on %v (%v), want [%s]", got.GetStatus().GetPublishedNodeIds(), err, name)
				}
				begin = time.Now()
				n.Use(t, id, ext4Cap, pc)
				// The attach+stage figures of docs/shared-pools-glusterfs.md,
				// with FILEVOL_GLUSTER_TLS=1 and without.
				t.Logf("%s: on %s attach %v, stage+publish %v (tls %v)", backend, name, attach.Round(time.Millisecond),
					time.Since(begin).Round(time.Millisecond), c.g != nil && c.g.TLS())
				for j, data := range written {
					if read, err := os.ReadFile(filepath.Join(n.Target, "data"+string(rune('0'+j)))); err != nil || !bytes.Equal(read, data) {
						t.Fatalf("on %s, file %d written on %s: %d bytes, %v; want %d", name, j, order[j], len(read), err, len(data))
					}
				}
				data := bytes.Repeat([]byte(name+" was here "), 1000*(i+1))
				if err := os.WriteFile(filepath.Join(n.Target, "data"+string(rune('0'+i))), data, 0o600); err != nil {
					t.Fatal(err)
				}
				written = append(written, data)
				n.Release(t, id)
				c.unpublish(id, name)
				c.unpublish(id, name) // idempotent
			}
			if _, err := c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
				t.Fatal(err)
			}
			c.unpublish(id, "node-a") // a volume that is gone is detached (CSI)
			c.checkClean(id)
		})
	}
}

const pcEpoch = "filevol.csi.io/attach-epoch"

// checkClean: the volume left nothing in the pool (image, record,
// attachment record and lock) nor in the kernel.
func (c *cluster) checkClean(id string) {
	c.t.Helper()
	for _, sub := range []string{"volumes", "attach", "inuse"} {
		entries, _ := os.ReadDir(filepath.Join(c.storage, sub))
		for _, e := range entries {
			if bytes.Contains([]byte(e.Name()), []byte(id)) {
				c.t.Errorf("left in the pool: %s/%s", sub, e.Name())
			}
		}
	}
	c.checkKernel()
}
