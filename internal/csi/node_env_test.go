package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/pool/imagenode"
	"github.com/filevol/filevol/internal/volume"
)

// The node unit tests run the NodeService on a real pool in a temporary
// directory and a fake kernel (hostos/fake): no root, no loop device, no
// mount. What reaches the kernel is checked on the fake's state (devices,
// mount table, filesystems) and its log; the real kernel is the business
// of test/sanity, test/lifecycle and test/faults.

// nodeEnv is one node: a pool, a fake kernel, the service.
type nodeEnv struct {
	t       *testing.T
	k       *fake.Host
	pool    *pool.Pool
	node    *NodeService
	kubelet string
}

func newNodeEnv(t *testing.T) *nodeEnv {
	t.Helper()
	k := fake.New()
	e, _ := nodeEnvOn(t, t.TempDir(), func(string) Host { return k.Host() })
	e.k = k
	return e
}

// nodeEnvOn is node n1 with its pool and kubelet directory under dir, on
// the host that host makes for the pool's directory (a fake kernel, or the
// real one: hostos.New); the driver is returned for what nodeEnv leaves out.
func nodeEnvOn(t *testing.T, dir string, host func(poolDir string) Host) (*nodeEnv, *Driver) {
	t.Helper()
	p, err := pool.Open(filepath.Join(dir, "pool"), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	h := host(p.Dir())
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(kubelet, 0o750); err != nil {
		t.Fatal(err)
	}
	d := New(Config{DriverName: "filevol.csi.io", NodeID: "n1", Node: true, KubeletDir: kubelet}, p, h, imagenode.New(p, h, "n1", false))
	return &nodeEnv{t: t, pool: p, node: d.Node, kubelet: kubelet}, d
}

// volume creates a volume of size bytes (thin: its image is made at stage).
func (e *nodeEnv) volume(name, fsType string, size int64) string {
	e.t.Helper()
	v, err := e.pool.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: size, FSType: fsType})
	if err != nil {
		e.t.Fatal(err)
	}
	return v.ID
}

// committed is volume with its image made (as after a first stage), so a
// test can put a signature in it before staging.
func (e *nodeEnv) committed(name, fsType string, size int64) string {
	e.t.Helper()
	id := e.volume(name, fsType, size)
	v, err := e.pool.Get(id)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.pool.CommitImage(v); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *nodeEnv) image(id string) string { return e.pool.ImagePath(id) }

func (e *nodeEnv) staging(name string) string {
	return filepath.Join(e.kubelet, "plugins/kubernetes.io/csi/filevol.csi.io", name, "globalmount")
}

func (e *nodeEnv) target(name string) string {
	return filepath.Join(e.kubelet, "pods/0b7e2c1a-5d4f-4c3b-9a8e-1f2d3c4b5a69/volumes/kubernetes.io~csi", name, "mount")
}

func capMount(fsType string, mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

func capBlock(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

const (
	rw     = csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	ro     = csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	single = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	multi  = csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
)

func (e *nodeEnv) stage(id, staging string, c *csipb.VolumeCapability) error {
	_, err := e.node.NodeStageVolume(context.Background(), &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: c})
	return err
}

func (e *nodeEnv) mustStage(id, staging string, c *csipb.VolumeCapability) {
	e.t.Helper()
	if err := e.stage(id, staging, c); err != nil {
		e.t.Fatalf("NodeStageVolume(%s): %v", id, err)
	}
}

func (e *nodeEnv) publish(id, staging, target string, c *csipb.VolumeCapability, readOnly bool) error {
	_, err := e.node.NodePublishVolume(context.Background(), &csipb.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: c, Readonly: readOnly})
	return err
}

func (e *nodeEnv) mustPublish(id, staging, target string, c *csipb.VolumeCapability, readOnly bool) {
	e.t.Helper()
	if err := e.publish(id, staging, target, c, readOnly); err != nil {
		e.t.Fatalf("NodePublishVolume(%s at %s): %v", id, target, err)
	}
}

func (e *nodeEnv) unpublish(id, target string) error {
	_, err := e.node.NodeUnpublishVolume(context.Background(), &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	return err
}

func (e *nodeEnv) unstage(id, staging string) error {
	_, err := e.node.NodeUnstageVolume(context.Background(), &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	return err
}

// devices returns the fake's loop devices backed by id's image.
func (e *nodeEnv) devices(id string) []loop.Device {
	e.t.Helper()
	devs, err := e.k.Find(e.image(id))
	if err != nil {
		e.t.Fatal(err)
	}
	return devs
}

// top returns the uppermost mount at path in the fake's table.
func (e *nodeEnv) top(path string) (mount.Info, bool) {
	e.t.Helper()
	table, err := e.k.Table()
	if err != nil {
		e.t.Fatal(err)
	}
	return table.Top(path)
}

// inUse returns the in-use records of id (what the controller reads).
func (e *nodeEnv) inUse(id string) []inuse.Entry {
	e.t.Helper()
	rec, err := inuse.New(e.pool.Dir()).Of(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := codeOf(err); got != want {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, want)
	}
}
