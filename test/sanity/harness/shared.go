package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/test/proc"
)

// RunSharedPoolProcess runs csi-sanity against one filevol process that
// serves the controller and the node (node-a) of a shared pool named
// poolName: ControllerPublishVolume is advertised, so its tests run and
// the node tests attach before they stage. (csi-sanity asks the node
// endpoint whether a controller service exists, so a split pair would
// skip publishing.) The process's socket, log and kubelet directory are
// in a scratch directory named scratch, and so is its pool (dir/pool)
// unless args name another; args are the pool's other flags, and mutate
// adjusts sanity's configuration. It returns that directory once the
// process has stopped, for the caller's checks of what is left; the
// process's log is in the test's log when sanity failed.
func RunSharedPoolProcess(t *testing.T, scratch, poolName string, mutate func(*sanity.TestConfig), args ...string) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, scratch)
	bin := proc.BuildDriver(t)
	kubelet := filepath.Join(dir, "node-a")
	if err := os.MkdirAll(kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	p := proc.Start(t, bin, dir, "all", append([]string{"--mode", "all", "--pool-shared", "--pool-name", poolName,
		"--node-id", "node-a", "--kubelet-dir", kubelet}, args...)...)
	cfg := ProcessConfig("unix://"+p.Sock, kubelet)
	if mutate != nil {
		mutate(&cfg)
	}
	sanity.Test(t, cfg)
	if t.Failed() {
		t.Logf("driver log:\n%s", p.LogText())
	}
	p.Stop(t)
	return dir
}

// CheckSharedPoolEmpty asserts that nothing of a volume is left in the
// image pool at pool: no image, snapshot, in-use or attachment record.
// The attachment lock file stays: it is every volume's, and permanent.
func CheckSharedPoolEmpty(t *testing.T, pool string) {
	t.Helper()
	for _, sub := range []string{"volumes", "snapshots", "inuse", "attach"} {
		entries, _ := os.ReadDir(filepath.Join(pool, sub))
		for _, e := range entries {
			if sub == "attach" && e.Name() == attach.LocksName {
				continue
			}
			t.Errorf("left in the pool: %s/%s", sub, e.Name())
		}
	}
}

// ProcessConfig is the csi-sanity configuration of the suites that run
// filevol as child processes (test/split, test/sanity/shared): the node
// endpoint, staging and target paths under mnt, the sizes and the xfs
// volumes they share. xfs grows online as plain root; ext4 needs
// CAP_SYS_RESOURCE, which the machines this runs on do not give, and
// sanity expands on the node alone when the node endpoint serves no
// controller.
func ProcessConfig(endpoint, mnt string) sanity.TestConfig {
	cfg := sanity.NewTestConfig()
	cfg.Address = endpoint
	cfg.TargetPath = filepath.Join(mnt, "target")
	cfg.StagingPath = filepath.Join(mnt, "staging")
	cfg.TestVolumeSize = 512 << 20
	cfg.TestVolumeExpandSize = 768 << 20
	cfg.IdempotentCount = 2
	cfg.TestVolumeParameters = map[string]string{csi.ParamFSType: "xfs"}
	cfg.TestVolumeMutableParameters = map[string]string{"readIOPS": "1000", "writeBytesPerSecond": "100Mi"}
	return cfg
}

// CephFSDirs mounts the harness's shared CephFS cluster
// (internal/testutil/ceph) on node-a and makes the directory sanity/<name>
// there for each of names: the pools of the suites that run csi-sanity on
// CephFS, in a ceph-fuse mount as a node's is. Root only.
func CephFSDirs(t *testing.T, names ...string) (*ceph.Cluster, []string) {
	t.Helper()
	testutil.RequireRoot(t)
	c := ceph.Shared(t)
	c.WaitForRoom(t) // csi-sanity creates volumes at once
	mnt := c.MountNode(t, "node-a")
	var dirs []string
	for _, name := range names {
		d := filepath.Join(mnt, "sanity", name)
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	return c, dirs
}
