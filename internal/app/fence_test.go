package app

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/sharedfs"
	"github.com/filevol/filevol/internal/volume"
)

// The fence by eviction is wired on a shared pool on CephFS only: the
// controller gets the evictor, the node the reading of its client; on
// GlusterFS, local and other filesystems, and on a node-local pool,
// nothing.
func TestWithFenceOnCephFSOnly(t *testing.T) {
	for _, c := range []struct {
		shared           bool
		kind             sharedfs.Kind
		mode             string
		fence, recording bool
	}{
		{true, sharedfs.KindCephFS, options.ModeController, true, false},
		{true, sharedfs.KindCephFS, options.ModeNode, false, true},
		{true, sharedfs.KindCephFS, options.ModeAll, true, true},
		{true, sharedfs.KindGlusterFS, options.ModeAll, false, false},
		{true, sharedfs.KindLocal, options.ModeAll, false, false},
		{true, sharedfs.KindOther, options.ModeAll, false, false},
		{false, sharedfs.KindCephFS, options.ModeAll, false, false},
	} {
		var po pool.Options
		rec := withFence(options.Options{PoolShared: c.shared, Mode: c.mode, PoolDir: t.TempDir()}, c.kind, &po)
		if (po.Fence != nil) != c.fence || (rec != nil) != c.recording {
			t.Errorf("shared %v on %s, mode %s: fence %v, recording %v; want %v, %v", c.shared, c.kind, c.mode, po.Fence != nil, rec != nil, c.fence, c.recording)
		}
	}
}

// A node notes the client it reads in its directory of the pool, for the
// controller's attachments, once per client: a client mounted again is
// noted at the next read; a failed read notes nothing and is returned.
func TestNodeNotesItsClient(t *testing.T) {
	dir := t.TempDir()
	if err := poolowner.Announce(dir, "node-a"); err != nil {
		t.Fatal(err)
	}
	cur := volume.StorageClient{Kind: "cephfs", ID: 4127, Cluster: "d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3"}
	var readErr error
	read := noteClient(dir, "node-a", func() (volume.StorageClient, bool, error) { return cur, readErr == nil, readErr })
	noted := func() inuse.Client {
		t.Helper()
		c, ok, err := poolowner.ClientOf(dir, "node-a")
		if err != nil || !ok {
			t.Fatalf("node-a's noted client: %v (found %v)", err, ok)
		}
		return c
	}
	if c, ok, err := read(); err != nil || !ok || c != cur || noted() != (inuse.Client{Kind: "cephfs", ID: 4127, Cluster: cur.Cluster}) {
		t.Fatalf("first read = %+v, %v, %v; noted %+v", c, ok, err, noted())
	}
	clientFile := filepath.Join(poolowner.Dir(dir, poolowner.Key("node-a")), "client")
	if err := os.Remove(clientFile); err != nil {
		t.Fatal(err)
	}
	if _, _, err := read(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(clientFile); !os.IsNotExist(err) {
		t.Fatalf("the same client noted again at every read: %v", err)
	}
	cur.ID = 4301
	if _, _, err := read(); err != nil || noted().ID != 4301 {
		t.Fatalf("a client mounted again: %v, noted %+v", err, noted())
	}
	readErr = errors.New("getxattr ceph.client_id: transport endpoint is not connected")
	cur.ID = 4400
	if _, _, err := read(); err != readErr || noted().ID != 4301 {
		t.Fatalf("a failed read = %v, noted %+v; want the error and nothing noted", err, noted())
	}
}
