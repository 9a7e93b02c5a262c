// Package snapshot tests snapshots, restores, clones and expansion
// on the real kernel: a real driver over its socket (test/driver), pools on
// xfs with reflink and on ext4 made by the tests on loop files, real loop
// devices, filesystems and mounts. Root only.
package snapshot

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/test/driver"
)

// Pool filesystems the tests make: xfs with reflink (the FICLONE engine)
// and ext4 (the hole-preserving copy).
const (
	poolXFS  = "xfs"
	poolExt4 = "ext4"
)

// startOn starts the driver on a pool filesystem of poolFS (size bytes,
// sparse) made on a loop file (driver.StartOnFilesystem).
func startOn(t testing.TB, poolFS string, size int64) *driver.Driver {
	t.Helper()
	return driver.StartOnFilesystem(t, "snapshot", poolFS, size)
}

// vol is one volume under test and where it is staged and published.
type vol struct {
	name, id, staging, target string
	cap                       *csipb.VolumeCapability
}

func (v *vol) block() bool { return v.cap.GetBlock() != nil }

// create makes a volume of size bytes, from src when not nil.
func create(t testing.TB, d *driver.Driver, name string, size int64, c *csipb.VolumeCapability, params map[string]string, src *csipb.VolumeContentSource) *vol {
	t.Helper()
	resp, err := d.Controller.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csipb.VolumeCapability{c}, Parameters: params,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size}, VolumeContentSource: src,
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return &vol{
		name: name, id: resp.GetVolume().GetVolumeId(), cap: c,
		staging: filepath.Join(d.Dir, "kubelet", name, "globalmount"),
		target:  filepath.Join(d.Dir, "kubelet", "pods", name, "mount"),
	}
}

func fromSnapshot(id string) *csipb.VolumeContentSource {
	return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *csipb.VolumeContentSource {
	return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
		Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

func snapshot(t testing.TB, d *driver.Driver, name, volumeID string) *csipb.Snapshot {
	t.Helper()
	resp, err := d.Controller.CreateSnapshot(context.Background(), &csipb.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		t.Fatalf("snapshot %s: %v", name, err)
	}
	if !resp.GetSnapshot().GetReadyToUse() {
		t.Fatalf("snapshot %s not ready to use", name)
	}
	return resp.GetSnapshot()
}

func up(t testing.TB, d *driver.Driver, v *vol) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.cap}); err != nil {
		t.Fatalf("stage %s: %v", v.name, err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.cap}); err != nil {
		t.Fatalf("publish %s: %v", v.name, err)
	}
}

func down(t testing.TB, d *driver.Driver, v *vol) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
		t.Fatalf("unpublish %s: %v", v.name, err)
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); err != nil {
		t.Fatalf("unstage %s: %v", v.name, err)
	}
}

// pattern is n deterministic pseudo-random bytes: checksums of real data,
// not of zeros a hole would also give.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 'f', 'v'})
	_, _ = r.Read(b)
	return b
}

// path is where v's data lives: a file on a mount volume, the device for block.
func (v *vol) path() string {
	if v.block() {
		return v.target
	}
	return filepath.Join(v.target, "data")
}

// put writes data at the start of v's data and syncs, unless nosync (data
// then sits in the page cache: only a freeze gets it into a snapshot).
func put(t testing.TB, v *vol, data []byte, nosync bool) {
	t.Helper()
	flags := os.O_WRONLY
	if !v.block() {
		flags |= os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(v.path(), flags, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatalf("write %s: %v", v.path(), err)
	}
	if !nosync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// sum is the sha256 of the first n bytes of v's data.
func sum(t testing.TB, v *vol, n int) [32]byte {
	t.Helper()
	b := make([]byte, n)
	f, err := os.Open(v.path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatalf("read %s: %v", v.path(), err)
	}
	return sha256.Sum256(b)
}

func statfsTotal(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

// needTools skips unless every program is installed.
func needTools(t testing.TB, programs ...string) {
	t.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			if _, err := os.Stat("/usr/sbin/" + p); err != nil {
				t.Skipf("%s is not installed (hack/install-deps.sh)", p)
			}
		}
	}
}

// hasCapSysResource reads CapEff from /proc/self/status: bit 24 is
// CAP_SYS_RESOURCE, which online ext4 growth (EXT4_IOC_RESIZE_FS) needs.
func hasCapSysResource(t testing.TB) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var eff uint64
			for _, c := range strings.TrimSpace(hex) {
				eff = eff<<4 | uint64(strings.IndexRune("0123456789abcdef", c))
			}
			return eff&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

func sha(b []byte) [32]byte { return sha256.Sum256(b) }
