package multinode

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/kubesim"
	"github.com/filevol/filevol/test/marker"
)

// The controller fences a CephFS node itself when the StorageClass's
// controller-publish Secret gives it the cluster's credentials
// (docs/shared-pools-cephfs.md): it evicts the client node-a recorded
// with its stage, at the force-detach (ControllerUnpublishVolume) or at
// node-b's attach refused by node-a's lock. Nobody else evicts here.

// fenceCaps are the capabilities the controller's user needs to evict,
// the least found to work (cephevict's package comment).
var fenceCaps = []string{"mon", "allow r", "mds", "allow *"}

// fenceSecrets makes the controller's cephx user for this test and
// returns the controller-publish Secret that names it, and one with a
// wrong key of the right form.
func (c *cluster) fenceSecrets() (good, bad map[string]string) {
	user := "fence-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(c.t.Name()))
	key := c.cph.AddUser(c.t, user, fenceCaps...)
	wrong := []byte(key)
	wrong[20] = map[bool]byte{true: 'B', false: 'A'}[wrong[20] == 'A'] // still base64, another secret
	return map[string]string{"adminID": user, "adminKey": key}, map[string]string{"adminID": user, "adminKey": string(wrong)}
}

func (c *cluster) publishWith(id, node string, secrets map[string]string) (map[string]string, error) {
	r, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node,
		VolumeCapability: blockCap, Secrets: secrets})
	return r.GetPublishContext(), err
}

func (c *cluster) unpublishWith(id, node string, secrets map[string]string) error {
	_, err := c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node, Secrets: secrets})
	return err
}

// fencedLogged: the controller logged that it fenced node's client id,
// the whole node; the line (with the eviction's and the lock's times) is
// logged here.
func (c *cluster) fencedLogged(node string, id uint64) {
	c.t.Helper()
	parts := []string{"node fenced", "every volume it mounts", fmt.Sprintf(`node="%s"`, node), fmt.Sprintf("client=%d", id)}
	if !c.ctrlP.WaitLog(5*time.Second, parts...) {
		c.t.Fatalf("the controller's log does not say it fenced %s's client %d:\n%s", node, id, c.ctrlP.LogText())
	}
	for _, l := range strings.Split(c.ctrlP.LogText(), "\n") {
		if strings.Contains(l, "node fenced") {
			c.t.Logf("controller: %s", l[max(0, strings.Index(l, "call=")):])
		}
	}
}

// checkClientRecorded: node's in-use record of the volume names its
// ceph-fuse client and the cluster, as the MDS lists them.
func (c *cluster) checkClientRecorded(id, node string) {
	c.t.Helper()
	e, ok, err := inuse.New(c.storage).Get(id, node)
	if err != nil || !ok {
		c.t.Fatalf("%s's in-use record of %s: %v (found %v)", node, id, err, ok)
	}
	want := c.cph.Client(c.t, node)
	if e.Client == nil || e.Client.Kind != "cephfs" || e.Client.ID != want.ID || e.Client.Cluster != c.cph.FSID() {
		c.t.Fatalf("%s's record names client %+v, want cephfs %d of %s", node, e.Client, want.ID, c.cph.FSID())
	}
}

// TestFencingNodeDeadEvictedByController (CephFS; make test): node-a dies (its
// filevol and its ceph-fuse killed) while its loop device holds the
// volume. The force-detach with a wrong key is refused naming the
// Secret's key and changes nothing (the attachment stays, node-a's client
// is not evicted); with the right credentials the controller evicts
// node-a's client and returns within seconds, and node-b is attached at
// once, where the MDS alone would keep node-a's lock about 65 s. Nothing
// node-a writes afterwards reaches the image.
func TestFencingNodeDeadEvictedByController(t *testing.T) {
	c := newCluster(t, "ceph", true, "node-a", "node-b")
	id, a, b := fenceSetup(t, c)
	good, bad := c.fenceSecrets()
	c.checkClientRecorded(id, "node-a")
	s := c.cph.Client(t, "node-a")
	t.Cleanup(func() { c.cph.Unblocklist(t, s) })

	a.kill()
	c.cph.KillClient(t, "node-a")
	killed := time.Now()
	err := c.unpublishWith(id, "node-a", bad)
	wantCode(t, "ControllerUnpublishVolume of dead node-a with a wrong key", err, codes.FailedPrecondition, "adminKey", "adminID", "nothing was changed")
	t.Logf("with a wrong key, %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	if st := c.cph.Client(t, "node-a"); st.ID != s.ID {
		t.Fatalf("node-a's client after the refused force-detach: %+v, want %d", st, s.ID)
	}
	if rec, err := attach.New(c.storage).Of(id); err != nil {
		t.Fatal(err)
	} else if _, ok := rec.Find("node-a"); !ok {
		t.Fatalf("the refused force-detach dropped node-a's attachment: %+v", rec)
	}

	begin := time.Now()
	if err := c.unpublishWith(id, "node-a", good); err != nil {
		t.Fatalf("the force-detach with the cluster's credentials: %v", err)
	}
	t.Logf("ceph: the force-detach with credentials returned in %v, %v after the kill", time.Since(begin).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	c.fencedLogged("node-a", s.ID)
	pc, fenced := attachWhenAllowed(t, c, id, "node-b", 10*time.Second, nil)
	t.Logf("ceph: node-b attached %v after node-a died, after %d fencing refusals", time.Since(killed).Round(time.Millisecond), fenced)
	if out := c.cph.Ceph(t, "osd", "blocklist", "ls"); !strings.Contains(out, s.Addr) {
		t.Errorf("node-a's address %s is not in the blocklist after its eviction: %s", s.Addr, out)
	}
	b.Use(t, id, blockCap, pc)
	t.Logf("node-b uses the volume %v after the kill", time.Since(killed).Round(time.Millisecond))
	lateWritesFenced(t, c, id, a, 1, "evicted")
	if !marker.Holds(t, b.Target, marker.Block(0), "before") {
		t.Error("node-b does not read node-a's data")
	}
	if w := marker.Write(b.Target, marker.Block(100), "b"); !w.OK() || !marker.Holds(t, c.image(id), marker.Block(100), "b") {
		t.Errorf("node-b's write: %v, or not in the image", w)
	}
	b.Release(t, id)
	c.unpublish(id, "node-b")
}

// TestFencingNodeCutOffEvictedByController (CephFS; make ceph-long): node-a
// is cut off from the cluster while its pod writes, its client alive but
// silent, as a node that lost its power or its link. The force-detach
// with the cluster's credentials evicts it from the controller, which
// learns node-a's client from the attachment record (node-a noted it in
// the pool, the controller copied it at the attach), since node-a's own
// records wait on its silent client until the MDS's session_timeout; so
// node-b is attached before that timeout could have freed node-a's lock.
// Nothing node-a writes during the cut, after node-b attached or after
// the link comes back reaches the image.
func TestFencingNodeCutOffEvictedByController(t *testing.T) {
	if !*withCeph {
		t.Skip("with -ceph (make ceph-long)")
	}
	c := newCluster(t, "ceph", true, "node-a", "node-b")
	id, a, b := fenceSetup(t, c)
	good, _ := c.fenceSecrets()
	s := c.cph.Client(t, "node-a")
	c.checkAttachmentClient(id, "node-a", s.ID)
	timeout := c.sessionTimeout()
	t.Cleanup(func() { c.cph.Unblocklist(t, s) })
	c.killCephClientAtEnd("node-a")
	attached := cutOffAndFenced(t, c, id, a, b, func(cut time.Time) {
		begin := time.Now()
		if err := c.unpublishWith(id, "node-a", good); err != nil {
			t.Fatalf("the force-detach of cut-off node-a with the cluster's credentials: %v", err)
		}
		t.Logf("ceph: the force-detach with credentials returned in %v, %v after the cut", time.Since(begin).Round(time.Millisecond), time.Since(cut).Round(time.Millisecond))
		c.fencedLogged("node-a", s.ID)
		if !c.ctrlP.LogHas("node fenced", "silent=true") {
			t.Errorf("the controller did not fence node-a as silent, by the client its attachment names:\n%s", c.ctrlP.LogText())
		}
	})
	if attached >= timeout {
		t.Errorf("node-b attached %v after the cut: not before the MDS's session_timeout (%v) could have freed node-a's lock", attached.Round(time.Millisecond), timeout)
	}
	if out := c.cph.Ceph(t, "osd", "blocklist", "ls"); !strings.Contains(out, s.Addr) {
		t.Errorf("node-a's address %s is not in the blocklist after its eviction: %s", s.Addr, out)
	}
}

// checkAttachmentClient: the controller's attachment record of the volume
// to node names node's ceph-fuse client id and the cluster.
func (c *cluster) checkAttachmentClient(id, node string, client uint64) {
	c.t.Helper()
	rec, err := attach.New(c.storage).Of(id)
	if err != nil {
		c.t.Fatal(err)
	}
	a, ok := rec.Find(node)
	if !ok || a.Client == nil || a.Client.Kind != "cephfs" || a.Client.ID != client || a.Client.Cluster != c.cph.FSID() {
		c.t.Fatalf("the attachment of %s to %s: %+v (found %v); want cephfs client %d of %s", id, node, a, ok, client, c.cph.FSID())
	}
}

// sessionTimeout is the MDS's session_timeout, after which it gives up on
// a client that does not answer.
func (c *cluster) sessionTimeout() time.Duration {
	c.t.Helper()
	var fs struct {
		MDSMap struct {
			SessionTimeout int `json:"session_timeout"`
		} `json:"mdsmap"`
	}
	out := c.cph.Ceph(c.t, "fs", "get", ceph.FSName, "--format", "json")
	if err := json.Unmarshal([]byte(out), &fs); err != nil || fs.MDSMap.SessionTimeout <= 0 {
		c.t.Fatalf("ceph fs get %s: %v: %s", ceph.FSName, err, out)
	}
	return time.Duration(fs.MDSMap.SessionTimeout) * time.Second
}

// TestFencingNodeEvictedOnAttach (CephFS): node-a's filevol is killed
// while its client lives and its device holds the volume; Kubernetes
// force-detaches it without a Secret (as before: the record goes, the
// lock stays; the controller logs what credentials would do). node-b's attach without credentials is refused, saying
// that credentials would let the controller evict; with a wrong key it is
// refused naming the Secret's keys, and node-a, not evicted, still writes
// to the image; with the right ones the controller evicts node-a's client
// and node-b is attached at that call, after which nothing of node-a
// reaches the image. With -ceph only (make ceph-long): make test proves
// the eviction, its wrong key and its secrets' way through
// TestFencingNodeDeadEvictedByController and internal/csi's
// TestFenceReceivesTheSecrets.
func TestFencingNodeEvictedOnAttach(t *testing.T) {
	if !*withCeph {
		t.Skip("with -ceph (make ceph-long)")
	}
	c := newCluster(t, "ceph", true, "node-a", "node-b")
	id, a, b := fenceSetup(t, c)
	good, bad := c.fenceSecrets()
	s := c.cph.Client(t, "node-a")
	a.kill()
	c.unpublish(id, "node-a") // the force-detach, without a Secret
	if !c.ctrlP.LogHas("force-detach of a node that still stages the volume, without the cluster's credentials", fmt.Sprintf("client %d", s.ID), "controller-publish Secret") {
		t.Errorf("the force-detach without credentials does not log what they would do:\n%s", c.ctrlP.LogText())
	}

	_, err := c.publish(id, "node-b", blockCap)
	if !kubesim.IsFencingRefusal(err) || !strings.Contains(err.Error(), "controller-publish Secret") || !strings.Contains(err.Error(), fmt.Sprintf("client %d", s.ID)) {
		t.Fatalf("node-b's attach without credentials: %v; want the fencing refusal saying credentials would let the controller evict client %d", err, s.ID)
	}
	_, err = c.publishWith(id, "node-b", bad)
	wantCode(t, "node-b's attach with a wrong key", err, codes.FailedPrecondition, "adminKey", "nothing was changed")
	if w := marker.Write(a.Target, marker.Block(1), "a-after-wrong-key"); !w.OK() || !marker.Holds(t, c.image(id), marker.Block(1), "a-after-wrong-key") {
		t.Fatalf("node-a's write after the refused eviction: %v, or not in the image: it was evicted", w)
	}

	t.Cleanup(func() { c.cph.Unblocklist(t, s) })
	c.killCephClientAtEnd("node-a")
	begin := time.Now()
	pc, err := c.publishWith(id, "node-b", good)
	if err != nil {
		t.Fatalf("node-b's attach with the cluster's credentials: %v", err)
	}
	t.Logf("ceph: node-b attached at its first try with credentials, in %v (node-a's live client evicted)", time.Since(begin).Round(time.Millisecond))
	c.fencedLogged("node-a", s.ID)
	b.Use(t, id, blockCap, pc)
	if w := marker.Write(a.Target, marker.Block(2), "a-after-eviction"); w.OK() {
		t.Errorf("evicted node-a's write succeeded: %v", w)
	}
	if marker.Holds(t, c.image(id), marker.Block(2), "a-after-eviction") {
		t.Error("evicted node-a's write reached the image")
	}
	for blk, text := range map[int64]string{0: "before", 1: "a-after-wrong-key"} {
		if !marker.Holds(t, b.Target, marker.Block(blk), text) {
			t.Errorf("node-b does not read node-a's %q", text)
		}
	}
	b.Release(t, id)
	c.unpublish(id, "node-b")
}
