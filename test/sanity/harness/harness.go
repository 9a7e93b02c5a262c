// Package harness runs csi-sanity (github.com/kubernetes-csi/csi-test/v5)
// in-process against the real filevol services: a real pool on disk, real
// loop devices, real filesystems and real mounts (root only). Each access
// type lives in its own test package because ginkgo runs one suite per
// process.
package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/testutil"
)

// NodeID is the node the sanity driver claims to be.
const NodeID = "sanity-node"

// Run starts filevol on a scratch pool and runs csi-sanity against it,
// after mutate adjusts the config. When sanity is done it checks that
// nothing leaked: no image or record left in the pool, no loop device
// backed by it, no mount under the scratch directory.
func Run(t *testing.T, name string, mutate func(*sanity.TestConfig)) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "sanity-"+name)
	p, err := pool.Open(filepath.Join(dir, "pool"), pool.Options{NodeID: NodeID})
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	d := csi.New(csi.Config{
		DriverName: "filevol.csi.io", Version: "sanity", NodeID: NodeID,
		MaxVolumesPerNode: 100, Controller: true, Node: true,
	}, p, csi.NewOSHost())
	sock := filepath.Join(dir, "csi.sock")
	lis, err := csi.Listen("unix://" + sock)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := csi.NewGRPCServer()
	d.Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- csi.Serve(ctx, srv, lis, 10*time.Second) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(dir, "mnt", "target")
	cfg.StagingPath = filepath.Join(dir, "mnt", "staging")
	cfg.TestVolumeSize = 512 << 20 // above the XFS minimum, small enough to format fast
	cfg.IdempotentCount = 2
	if mutate != nil {
		mutate(&cfg)
	}
	sanity.Test(t, cfg)

	checkNoLeaks(t, dir, p)
}

// checkNoLeaks asserts csi-sanity's cleanup left nothing behind.
func checkNoLeaks(t *testing.T, dir string, p *pool.Pool) {
	t.Helper()
	if vols := p.List(); len(vols) != 0 {
		t.Errorf("%d volume(s) left in the pool after sanity, first %s", len(vols), vols[0].ID)
	}
	entries, err := os.ReadDir(filepath.Join(p.Dir(), "volumes"))
	if err != nil {
		t.Errorf("read pool: %v", err)
	}
	for _, e := range entries {
		t.Errorf("file left in the pool: %s", e.Name())
	}
	devs, err := loop.List()
	if err != nil {
		t.Errorf("list loop devices: %v", err)
	}
	for _, d := range devs {
		if strings.HasPrefix(d.BackingFile, dir+"/") {
			t.Errorf("loop device %s still backed by %s", d.Path, d.BackingFile)
		}
	}
	table, err := mount.Read()
	if err != nil {
		t.Errorf("read mounts: %v", err)
	}
	for _, m := range table.Under(dir) {
		t.Errorf("mount left at %s (%s)", m.MountPoint, m.Source)
	}
}
