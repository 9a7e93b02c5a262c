package multinode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTwoControllersRaceForOneVolume: during a leader hand-over two
// controller replicas serve at once (the old leader finishing its calls,
// the new one retrying them). Two controller processes on one shared pool
// race, for the same volume names, CreateVolume, ControllerPublishVolume
// (to two nodes), ControllerPublishVolume against DeleteVolume, and
// DeleteVolume: both creates get the one volume; one attach wins and the
// other is told which node has it; an attach and a delete never both
// succeed; and nothing of a deleted volume is left in the pool.
func TestTwoControllersRaceForOneVolume(t *testing.T) {
	for _, backend := range backendsWithCeph() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true, "node-a", "node-b")
			second := c.start("ctrl2", "controller", c.poolFor("ctrl2"), c.dir)
			ctrls := [2]csipb.ControllerClient{c.ctrl, csipb.NewControllerClient(second.Conn)}
			rounds := 12
			if c.g != nil {
				rounds = 6
			}
			var outcomes = map[string]int{}
			for r := range rounds {
				name := fmt.Sprintf("race-%d", r)
				var ids [2]string
				both(func(i int) {
					v, err := ctrls[i].CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{blockCap},
						CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
					if err != nil {
						t.Errorf("%s: CreateVolume on controller %d: %v", name, i, err)
					}
					ids[i] = v.GetVolume().GetVolumeId()
				})
				if t.Failed() || ids[0] != ids[1] {
					t.Fatalf("%s: racing creates gave %q and %q", name, ids[0], ids[1])
				}
				id := ids[0]

				nodes := [2]string{"node-a", "node-b"}
				var perr [2]error
				both(func(i int) {
					_, perr[i] = ctrls[i].ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodes[i], VolumeCapability: blockCap})
				})
				won := -1
				for i, err := range perr {
					if err == nil {
						won = i
					}
				}
				if won < 0 || perr[1-won] == nil {
					t.Fatalf("%s: racing attaches to node-a and node-b: %v, %v; want exactly one", name, perr[0], perr[1])
				}
				if lost := perr[1-won]; status.Code(lost) != codes.FailedPrecondition || !strings.Contains(lost.Error(), nodes[won]) {
					t.Fatalf("%s: the losing attach: %v; want FAILED_PRECONDITION naming %s", name, lost, nodes[won])
				}
				c.unpublish(id, nodes[won])

				// An attach and a delete, each in another controller.
				var aerr, derr error
				both(func(i int) {
					if i == 0 {
						_, aerr = ctrls[0].ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: blockCap})
					} else {
						_, derr = ctrls[1].DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
					}
				})
				switch {
				case aerr == nil && derr == nil:
					t.Fatalf("%s: an attach and a delete both succeeded", name)
				case aerr == nil:
					if status.Code(derr) != codes.FailedPrecondition {
						t.Fatalf("%s: the delete beside a successful attach: %v; want FAILED_PRECONDITION", name, derr)
					}
					outcomes["attach first"]++
					c.unpublish(id, "node-a")
				case derr == nil:
					if status.Code(aerr) != codes.NotFound {
						t.Fatalf("%s: the attach beside a successful delete: %v; want NOT_FOUND", name, aerr)
					}
					outcomes["delete first"]++
				default:
					t.Fatalf("%s: attach %v, delete %v", name, aerr, derr)
				}
				var dErr [2]error
				both(func(i int) { _, dErr[i] = ctrls[i].DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}) })
				if dErr[0] != nil || dErr[1] != nil {
					t.Fatalf("%s: racing deletes: %v, %v", name, dErr[0], dErr[1])
				}
				c.checkPoolHasNothingOf(id)
			}
			t.Logf("%s: %d rounds; attach against delete: %v", backend, rounds, outcomes)
		})
	}
}

// both runs f(0) and f(1) at once and waits for both.
func both(f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); <-start; f(i) }()
	}
	close(start)
	wg.Wait()
}

// checkPoolHasNothingOf: no file of any kind (record, image, temporary
// file, attachment record or lock) names the volume.
func (c *cluster) checkPoolHasNothingOf(id string) {
	c.t.Helper()
	_ = filepath.WalkDir(c.storage, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), id) {
			c.t.Errorf("left in the pool after the volume was deleted: %s", strings.TrimPrefix(path, c.storage+"/"))
		}
		return nil
	})
}
