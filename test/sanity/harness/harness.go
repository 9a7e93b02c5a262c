// Package harness runs csi-sanity (github.com/kubernetes-csi/csi-test/v5)
// against the real filevol services: a real pool on disk, real loop
// devices, real filesystems and real mounts (root only), served in-process
// (Run, RunDir) or by a filevol process of its own (RunSharedPoolProcess,
// for a shared pool, on a local directory or on CephFS). Each suite lives
// in its own test package because ginkgo runs one suite per process.
package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// Run starts filevol on a scratch pool and runs csi-sanity against it,
// after mutate adjusts the config. When sanity is done it checks that
// nothing leaked: no image or record left in the pool, no loop device
// backed by it, no mount under the scratch directory.
func Run(t *testing.T, name string, mutate func(*sanity.TestConfig)) { run(t, name, false, mutate) }

// RunDir runs csi-sanity on directory volumes: a directory pool on a
// btrfs of its own served beside the image pool, and a StorageClass
// with provisioningMode: directory. After sanity it checks that the
// directory pool holds no volume, snapshot or subvolume.
func RunDir(t *testing.T, name string, mutate func(*sanity.TestConfig)) {
	run(t, name, true, func(cfg *sanity.TestConfig) {
		cfg.TestVolumeParameters = map[string]string{dirpool.ParamProvisioningMode: dirpool.ProvisioningModeDirectory}
		// A directory volume has no I/O limits (they throttle an image's
		// loop device): no mutable parameters to modify it with.
		cfg.TestVolumeMutableParameters = nil
		if mutate != nil {
			mutate(cfg)
		}
	})
}

func run(t *testing.T, name string, withDir bool, mutate func(*sanity.TestConfig)) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "sanity-"+name)
	dirPool := ""
	if withDir {
		// Its own scratch directory: the kernel check below is about what
		// the driver leaves, not about the pool filesystem itself.
		dirPool = dirpooltest.Btrfs(t, testutil.Scratch(t, "sanity-"+name+"-btrfs"), 1<<30)
	}
	d := driver.StartWithDirPool(t, dir, dirPool)
	defer d.Stop(t)
	sock, p := d.Socket, d.Pool
	if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(dir, "mnt", "target")
	cfg.StagingPath = filepath.Join(dir, "mnt", "staging")
	cfg.TestVolumeSize = 512 << 20 // above the XFS minimum, small enough to format fast
	// Expansion tests grow to this (default: +1 GiB); whole MiB, so the
	// size filevol answers is exactly the one sanity expects.
	cfg.TestVolumeExpandSize = 768 << 20
	cfg.IdempotentCount = 2
	// ControllerModifyVolume's tests create and modify volumes with these
	// (a VolumeAttributesClass's parameters: the I/O limits).
	cfg.TestVolumeMutableParameters = map[string]string{"readIOPS": "1000", "writeBytesPerSecond": "100Mi"}
	if mutate != nil {
		mutate(&cfg)
	}
	sanity.Test(t, cfg)

	checkNoLeaks(t, dir, p)
	if d.DirPool != nil {
		checkNoDirLeaks(t, d.DirPool, dirPool)
	}
}

// checkNoDirLeaks asserts that the directory pool holds nothing after
// sanity's cleanup: no record, and once the trash is emptied no
// subvolume being made or deleted.
func checkNoDirLeaks(t *testing.T, dp *dirpool.Pool, dir string) {
	t.Helper()
	if vols := dp.List(); len(vols) != 0 {
		t.Errorf("%d directory volume(s) left after sanity, first %s", len(vols), vols[0].ID)
	}
	if snaps := dp.ListSnapshots(); len(snaps) != 0 {
		t.Errorf("%d directory snapshot(s) left after sanity, first %s", len(snaps), snaps[0].ID)
	}
	if err := dp.EmptyTrash(); err != nil {
		t.Errorf("empty the trash: %v", err)
	}
	for _, sub := range []string{".filevol/tmp", ".filevol/trash", ".filevol/snaps"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Errorf("read directory pool: %v", err)
		}
		for _, e := range entries {
			t.Errorf("left in the directory pool: %s/%s", sub, e.Name())
		}
	}
}

// checkNoLeaks asserts csi-sanity's cleanup left nothing behind.
func checkNoLeaks(t *testing.T, dir string, p *pool.Pool) {
	t.Helper()
	if vols := p.List(); len(vols) != 0 {
		t.Errorf("%d volume(s) left in the pool after sanity, first %s", len(vols), vols[0].ID)
	}
	if snaps := p.ListSnapshots(); len(snaps) != 0 {
		t.Errorf("%d snapshot(s) left in the pool after sanity, first %s", len(snaps), snaps[0].ID)
	}
	for _, sub := range []string{"volumes", "snapshots"} {
		entries, err := os.ReadDir(filepath.Join(p.Dir(), sub))
		if err != nil {
			t.Errorf("read pool: %v", err)
		}
		for _, e := range entries {
			t.Errorf("file left in the pool: %s/%s", sub, e.Name())
		}
	}
	CheckKernelClean(t, dir)
}

// CheckKernelClean asserts that no loop device is backed by a file under
// dir and nothing is mounted under it.
func CheckKernelClean(t *testing.T, dir string) {
	t.Helper()
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
