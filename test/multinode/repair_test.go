package multinode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/poolowner"
)

// TestRepairAtOpenWaitsForTheOwnersOtherReplica: two controller replicas
// run as one owner (--controller-id, "controller" by default) on two hosts (on GlusterFS two client
// mounts). A replica repairs its owner's leftovers at open only when no
// other process of the owner has the pool open, which it learns from the
// owner's OFD lock, held on the brick across mounts: the second replica's
// start leaves the first's create in flight alone; once both are gone, a
// replica starting alone removes it.
func TestRepairAtOpenWaitsForTheOwnersOtherReplica(t *testing.T) {
	for _, backend := range backendsWithCeph() {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, backend, true)
			id := c.create("for-its-id", blockCap)
			// Another volume ID of this pool: the first replica's create
			// of it is in flight (its temporary image).
			other := id[:len(id)-32] + strings.Repeat("ab", 16)
			inflight := filepath.Join(c.storage, "volumes", ".tmp-"+other+"@"+poolowner.Key("controller/controller")+".img")
			if c.g != nil {
				inflight = filepath.Join(c.poolFor("writer"), "volumes", filepath.Base(inflight))
			}
			if err := os.WriteFile(inflight, []byte("in flight"), 0o600); err != nil {
				t.Fatal(err)
			}
			mnt := c.dir
			second := c.startAs("ctrl-2", "ctrl", "controller", c.poolFor("ctrl-2"), mnt) // same owner, another host
			if _, err := os.Stat(inflight); err != nil {
				t.Fatalf("the second replica's start removed the first's create in flight: %v", err)
			}
			second.Stop(t)
			c.ctrlP.Stop(t)
			alone := c.startAs("ctrl-3", "ctrl", "controller", c.poolFor("ctrl-3"), mnt)
			if _, err := os.Stat(inflight); !os.IsNotExist(err) {
				t.Fatalf("a replica starting alone kept its owner's leftover: %v\n%s", err, alone.LogText())
			}
		})
	}
}
