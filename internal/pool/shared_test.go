package pool

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// Two Pools with different owners opened on one directory are two nodes
// sharing a pool. What one host's flock sees of the other is nothing (it
// is local to each host on some shared filesystems, and says nothing of
// whose a file is on any): the tests close node A before node B opens,
// which is how A looks from another host, however alive it is.

// openShared opens dir as a shared pool for the node named owner.
func openShared(tb testing.TB, dir, owner string) *Pool {
	tb.Helper()
	return openPool(tb, dir, Options{NodeID: owner, Shared: true})
}

// tmpRecord writes a temporary record of p's owner for id, as a create or
// a rewrite of p's in flight has it, and returns its name.
func tmpRecord(t *testing.T, p *Pool, id string) string {
	t.Helper()
	name := ".tmp-" + id + p.tag + ".json.k3x9"
	write(t, p.vdir+"/"+name, "{")
	return name
}

// TestSharedRepairTouchesOnlyItsOwnersFiles: node B's open leaves every
// file of node A's operations as it is, in flight or not; A's next open
// resolves them; B's own leftovers are B's to repair.
func TestSharedRepairTouchesOnlyItsOwnersFiles(t *testing.T) {
	dir := testutil.Scratch(t, "pool-shared")
	a := openShared(t, dir, "node-a")
	// A's operations in flight, each at the instant another host sees it:
	//  - a create before its commit point: a temporary image and record;
	inflight := VolumeID("a-creating")
	write(t, a.tmpImagePath(inflight), "")
	aTmpRecord := tmpRecord(t, a, inflight)
	//  - a create after it (or a delete before it): record, image aside;
	committed := mustUse(t, a, mustCreate(t, a, volume.CreateRequest{Name: "a-committed", CapacityBytes: 1 << 20}))
	mv(t, a.imagePath(committed.ID), a.tmpImagePath(committed.ID))
	//  - the first use of a blank volume making its image;
	pending := mustCreate(t, a, volume.CreateRequest{Name: "a-pending", CapacityBytes: 1 << 20})
	write(t, a.tmpImagePath(pending.ID), "")
	//  - an expansion between growing the image and recording it;
	growing := mustUse(t, a, mustCreate(t, a, volume.CreateRequest{Name: "a-growing", CapacityBytes: 1 << 20}))
	truncate(t, a.imagePath(growing.ID), 2<<20)
	//  - and an image whose record B's view of the directory does not
	//    show yet (a shared filesystem caches lookups).
	unseen := VolumeID("a-unseen")
	write(t, a.imagePath(unseen), "A's data")
	// An untagged temporary image: of no owner anyone knows.
	untagged := ".tmp-" + VolumeID("nobody") + ".img"
	write(t, a.vdir+"/"+untagged, "")
	before := ls(t, a.vdir)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	// B's leftovers of a create killed before its commit point.
	bKey := poolowner.Key("node-b")
	bTmpImage := ".tmp-" + VolumeID("b-killed") + "@" + bKey + ".img"
	bTmpRecord := ".tmp-" + VolumeID("b-killed") + "@" + bKey + ".json.z1"
	write(t, a.vdir+"/"+bTmpImage, "")
	write(t, a.vdir+"/"+bTmpRecord, "{")

	b := openShared(t, dir, "node-b")
	if got := ls(t, b.vdir); !slices.Equal(got, before) {
		t.Errorf("after B's open volumes/ holds\n%v\nwant A's files as they were (B's own leftovers removed)\n%v", got, before)
	}
	if q := ls(t, b.qdir); len(q) != 0 {
		t.Errorf("B's open quarantined %v", q)
	}
	if v, err := b.Get(growing.ID); err != nil || v.CapacityBytes != 1<<20 {
		t.Errorf("B's open rewrote A's record of an expansion in flight: %+v, %v", v, err)
	}
	if o, err := b.FindOrphans(); err != nil || o.Count() != 0 || !slices.Contains(o.TempFiles, aTmpRecord) {
		t.Errorf("B's scan: %+v, %v; want A's files in flight reported as temporary, nothing orphaned", o, err)
	}

	// A's next open (B's still open) resolves A's own leftovers, and
	// only A's.
	a = openShared(t, dir, "node-a")
	for _, name := range []string{tmpImageName(inflight, a.tag), aTmpRecord,
		tmpImageName(committed.ID, a.tag), tmpImageName(pending.ID, a.tag)} {
		if _, err := os.Stat(a.vdir + "/" + name); !os.IsNotExist(err) {
			t.Errorf("A's reopen left its %s: %v", name, err)
		}
	}
	for _, id := range []string{committed.ID, pending.ID} {
		if !a.ImageExists(id) {
			t.Errorf("A's reopen did not roll %s forward", id)
		}
	}
	for _, name := range []string{untagged, unseen + ".img"} {
		if _, err := os.Stat(a.vdir + "/" + name); err != nil {
			t.Errorf("A's reopen touched %s, which is not A's: %v", name, err)
		}
	}
	// And the volumes work: the pending one is used, the committed one
	// deleted.
	if _, err := a.CommitImage(pending); err != nil {
		t.Errorf("first use of A's pending volume: %v", err)
	}
	if err := b.Delete(context.Background(), committed.ID); err != nil || b.ImageExists(committed.ID) {
		t.Errorf("delete from B of A's rolled-forward volume: %v", err)
	}
}

// TestSharedOwnerLock: a second process of one owner (a controller's
// replicas, a node's restarted driver while the old one still ends) does
// not take the first's files in flight for leftovers.
func TestSharedOwnerLock(t *testing.T) {
	dir := testutil.Scratch(t, "pool-shared")
	first := openShared(t, dir, "node-a")
	inflight := first.tmpImagePath(VolumeID("x"))
	write(t, inflight, "")
	second := openShared(t, dir, "node-a")
	if _, err := os.Stat(inflight); err != nil {
		t.Fatalf("a second open of the owner removed the first's file in flight: %v", err)
	}
	_ = first.Close()
	_ = second.Close()
	openShared(t, dir, "node-a")
	if _, err := os.Stat(inflight); !os.IsNotExist(err) {
		t.Errorf("the owner's open, alone, kept its leftover %s: %v", inflight, err)
	}
	if data, err := os.ReadFile(dir + "/owners/" + poolowner.Key("node-a") + "/owner"); err != nil || string(data) != "node-a\n" {
		t.Errorf("owner name file: %q, %v", data, err)
	}
}

// On a shared pool an image without a record is an orphan only once it
// is older than the grace period: before, it may be another host's
// create whose record this host does not see yet. On a node-local pool,
// at once, as always.
func TestSharedOrphanGrace(t *testing.T) {
	dir := testutil.Scratch(t, "pool-shared")
	p := openPool(t, dir, Options{NodeID: "node-b", Shared: true, OrphanGrace: 200 * time.Millisecond})
	id := VolumeID("stray")
	write(t, p.imagePath(id), "maybe data")
	if o, err := p.FindOrphans(); err != nil || len(o.ImagesWithoutRecord) != 0 {
		t.Errorf("a fresh image without record listed as an orphan: %+v, %v", o, err)
	}
	if moved, err := p.QuarantineImage(id); moved || err != nil {
		t.Errorf("QuarantineImage of a fresh image = %v, %v; want it left", moved, err)
	}
	time.Sleep(300 * time.Millisecond)
	if o, err := p.FindOrphans(); err != nil || !slices.Equal(o.ImagesWithoutRecord, []string{id}) {
		t.Errorf("an image past the grace not listed: %+v, %v", o, err)
	}
	if moved, err := p.QuarantineImage(id); !moved || err != nil {
		t.Errorf("QuarantineImage past the grace = %v, %v", moved, err)
	}
	// Another node's sweep moved it first: nothing to do, no error.
	if moved, err := p.QuarantineImage(id); moved || err != nil {
		t.Errorf("QuarantineImage of an image gone = %v, %v", moved, err)
	}

	local := openPool(t, testutil.Scratch(t, "pool-local"), Options{})
	write(t, local.imagePath(id), "maybe data")
	if moved, err := local.QuarantineImage(id); !moved || err != nil {
		t.Errorf("node-local QuarantineImage = %v, %v", moved, err)
	}
}

// A pool once opened as shared is refused to a node-local open, which
// would repair the whole pool as if it held it alone; a node-local pool
// opened as shared becomes shared.
func TestSharedPoolIsMarked(t *testing.T) {
	dir := testutil.Scratch(t, "pool-shared")
	p := openPool(t, dir, Options{})
	ident := p.ident
	_ = p.Close()
	p = openShared(t, dir, "node-1")
	if p.ident.ID != ident.ID || !p.ident.Shared {
		t.Errorf("identity after a shared open: %+v, was %+v", p.ident, ident)
	}
	_ = p.Close()
	if p, err := Open(dir, Options{NodeID: "node-1"}); err == nil || !strings.Contains(err.Error(), "--pool-shared") {
		if p != nil {
			_ = p.Close()
		}
		t.Errorf("node-local open of a shared pool = %v, want refused", err)
	}
}

// A node-local pool opened as shared (an upgrade): what its node-local
// past left stays readable. Its node adopts its freeze marks; the
// untagged temporary files of that past have no owner the shared pool
// knows, and are left (reported) for an operator; the records, images and
// markers are where they were.
func TestSharedOpenOfANodeLocalPool(t *testing.T) {
	dir := testutil.Scratch(t, "pool-shared")
	local := openPool(t, dir, Options{NodeID: "node-a"})
	v := mustUse(t, local, mustCreate(t, local, volume.CreateRequest{Name: "v", CapacityBytes: 1 << 20}))
	if err := local.NodeState().Frozen.Set(v.ID); err != nil {
		t.Fatal(err)
	}
	if err := local.NodeState().Format.Set(v.ID); err != nil {
		t.Fatal(err)
	}
	leftover := ".tmp-" + VolumeID("killed") + ".img"
	write(t, local.vdir+"/"+leftover, "")
	_ = local.Close()

	b := openShared(t, dir, "node-b")
	if b.NodeState().Frozen.IsSet(v.ID) {
		t.Error("node B took node A's freeze mark")
	}
	_ = b.Close()
	a := openShared(t, dir, "node-a")
	if !a.NodeState().Frozen.IsSet(v.ID) {
		t.Error("node A did not adopt its freeze mark of the node-local layout")
	}
	if _, err := os.Stat(dir + "/frozen/" + v.ID); !os.IsNotExist(err) {
		t.Errorf("the adopted mark is still in the node-local layout: %v", err)
	}
	if !a.NodeState().Format.IsSet(v.ID) || !a.ImageExists(v.ID) {
		t.Error("the volume's format marker or image is gone")
	}
	if o, err := a.FindOrphans(); err != nil || !slices.Contains(o.TempFiles, leftover) {
		t.Errorf("the untagged leftover is not reported: %+v, %v", o, err)
	}
}
