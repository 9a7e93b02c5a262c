// Package driver starts the real filevol services in-process for tests: a
// real pool on disk, real loop devices and mounts, served over a unix
// socket exactly as the sidecars and kubelet reach it. Tests get gRPC
// clients and can stop and restart the driver on the same pool, which is
// how restarts and reboots are simulated.
package driver

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirnode"
	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/pool/imagenode"
	"github.com/filevol/filevol/internal/volid"
)

// NodeID is the node the test driver claims to be.
const NodeID = "test-node"

// Driver is one running in-process filevol.
type Driver struct {
	Dir, PoolDir, Socket string
	Pool                 *pool.Pool
	// DirPool is the directory pool served beside Pool (StartWithDirPool).
	DirPool    *dirpool.Pool
	Controller csipb.ControllerClient
	// Group is the GroupController service (group snapshots).
	Group    csipb.GroupControllerClient
	Node     csipb.NodeClient
	Identity csipb.IdentityClient
	// Meta is the SnapshotMetadata service (changed-block tracking).
	Meta csipb.SnapshotMetadataClient
	// Services are the in-process services, for what has no RPC (GC).
	Services *csi.Driver

	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan error
}

// Start serves filevol on dir/pool and dir/csi.sock. Stop it with Stop;
// t.Cleanup stops it too if the test did not.
func Start(t testing.TB, dir string) *Driver { return StartWith(t, dir, "", nil) }

// StartWithDirPool is Start with the directory pool in dirPoolDir (a
// directory on btrfs; "" for none) served beside the image pool, as
// --dir-pool-dir does.
func StartWithDirPool(t testing.TB, dir, dirPoolDir string) *Driver {
	return StartWith(t, dir, dirPoolDir, nil)
}

// StartWith is Start with a directory pool (as StartWithDirPool) and the
// services' configuration adjusted by mutate first (nil: none).
func StartWith(t testing.TB, dir, dirPoolDir string, mutate func(*csi.Config)) *Driver {
	t.Helper()
	d := &Driver{Dir: dir, PoolDir: filepath.Join(dir, "pool"), Socket: filepath.Join(dir, "csi.sock")}
	p, err := pool.Open(d.PoolDir, pool.Options{NodeID: NodeID})
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	d.Pool = p
	cfg := csi.Config{
		DriverName: "filevol.csi.io", Version: "test", NodeID: NodeID,
		MaxVolumesPerNode: 100, Controller: true, Node: true, KubeletDir: dir,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	h := hostos.New(p.Dir())
	svc := csi.New(cfg, p, h, imagenode.New(p, h, cfg.NodeID, cfg.Shared))
	d.Services = svc
	if dirPoolDir != "" {
		dp, err := dirpool.Open(dirPoolDir, dirpool.Options{NodeID: NodeID})
		if err != nil {
			t.Fatalf("open directory pool: %v", err)
		}
		d.DirPool = dp
		svc.Serve(dp.ID(), volid.KindDir, dp, dirnode.New(dp, h, cfg.KubeletDir))
	}
	lis, err := csi.Listen("unix://" + d.Socket)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := csi.NewGRPCServer()
	svc.Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan error, 1)
	agentDone := make(chan struct{})
	go func() { svc.Freeze.Run(ctx); close(agentDone) }()
	go svc.Node.RunQoS(ctx) // returns at once unless cfg.CgroupRoots throttle
	go func() { err := csi.Serve(ctx, srv, lis, 10*time.Second); <-agentDone; d.done <- err }()
	d.conn, err = grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	d.Controller = csipb.NewControllerClient(d.conn)
	d.Group = csipb.NewGroupControllerClient(d.conn)
	d.Node = csipb.NewNodeClient(d.conn)
	d.Identity = csipb.NewIdentityClient(d.conn)
	d.Meta = csipb.NewSnapshotMetadataClient(d.conn)
	t.Cleanup(func() { d.Stop(t) })
	return d
}

// Stop stops serving (idempotent).
func (d *Driver) Stop(t testing.TB) {
	if d.cancel == nil {
		return
	}
	d.conn.Close()
	d.cancel()
	if err := <-d.done; err != nil {
		t.Errorf("serve: %v", err)
	}
	// Release the pool's lock (and its directory fd) as a stopped process would.
	if err := d.Services.Close(); err != nil {
		t.Errorf("close services: %v", err)
	}
	if err := d.Pool.Close(); err != nil {
		t.Errorf("close pool: %v", err)
	}
	if d.DirPool != nil {
		if err := d.DirPool.Close(); err != nil {
			t.Errorf("close directory pool: %v", err)
		}
	}
	d.cancel = nil
}

// SimulateReboot leaves what a reboot leaves: records and images on disk,
// no mounts and no loop devices.
func SimulateReboot(t testing.TB, dir string) {
	t.Helper()
	table, err := mount.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range table.Under(dir) {
		if err := mount.UnmountAll(m.MountPoint); err != nil {
			t.Fatalf("unmount %s: %v", m.MountPoint, err)
		}
	}
	for _, l := range Loops(t, dir) {
		// A device just unmounted can stay claimed for a moment while
		// another mount namespace still holds a copy of the mount (a
		// container or a test server being set up copies the host's
		// mount table, then drops it): retry for up to two seconds.
		err := loop.Detach(l.Path)
		for i := 0; i < 40 && errors.Is(err, loop.ErrBusy); i++ {
			time.Sleep(50 * time.Millisecond)
			err = loop.Detach(l.Path)
		}
		if err != nil {
			t.Fatalf("detach %s: %v", l.Path, err)
		}
	}
}

// Loops returns the loop devices backed by files under dir.
func Loops(t testing.TB, dir string) []loop.Device {
	t.Helper()
	devs, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []loop.Device
	for _, l := range devs {
		if strings.HasPrefix(l.BackingFile, dir+"/") {
			out = append(out, l)
		}
	}
	return out
}

// Mounts returns the mounts at or under dir.
func Mounts(t testing.TB, dir string) []mount.Info {
	t.Helper()
	table, err := mount.Read()
	if err != nil {
		t.Fatal(err)
	}
	return table.Under(dir)
}

// MountCap is a SINGLE_NODE_WRITER mount capability of fsType ("" = default).
func MountCap(fsType string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType}},
	}
}

// BlockCap is a SINGLE_NODE_WRITER block capability.
func BlockCap() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
	}
}
