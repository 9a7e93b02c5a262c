// Package app assembles one filevol process from its options: it opens the
// pool, builds the CSI services for the mode, serves them on the endpoint
// and the optional HTTP endpoint (/healthz, /metrics, /debug/volumes),
// starts the garbage collector and, when an API server is configured, the
// monitor that reports Events; it shuts down cleanly on cancel. It holds no
// CSI or storage logic of its own.
package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/clienttls"
	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirnode"
	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/metrics"
	"github.com/filevol/filevol/internal/nodeview"
	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/pool/imagenode"
	"github.com/filevol/filevol/internal/reading"
	"github.com/filevol/filevol/internal/registration"
	"github.com/filevol/filevol/internal/sharedfs"
	"github.com/filevol/filevol/internal/version"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// shutdownGrace bounds how long in-flight calls may run after SIGTERM;
// kubelet's own CSI timeouts are longer, and it retries.
const shutdownGrace = 30 * time.Second

// tlsResync is how often a shared pool's TLS files are installed again
// from their Secret: kubelet itself updates a mounted Secret about once a
// minute.
const tlsResync = 30 * time.Second

// Run serves until ctx is cancelled, then stops accepting, finishes
// in-flight calls and removes the socket.
//
// A shared pool is opened only on a filesystem that meets its kind's
// requirements (checkSharedFS), or whose missing ones
// --shared-pool-unsafe-allow names; its client's TLS files are installed
// from their Secret first, since the node's mount may wait for them.
func Run(ctx context.Context, o options.Options) error {
	var risks sharedRisks
	if o.PoolShared {
		var err error
		check := func(dir string) (sharedfs.Report, error) {
			return sharedfs.CheckWith(dir, sharedfs.Options{CephSocketDirs: o.CephAdminSocketDirs})
		}
		if o.SharedPoolTLSSecretDir != "" {
			if err := clienttls.InstallFrom(o.SharedPoolTLSSecretDir, o.SharedPoolTLSDir); err != nil {
				return fmt.Errorf("shared pool TLS files (--shared-pool-tls-secret-dir %s): %w", o.SharedPoolTLSSecretDir, err)
			}
			go clienttls.Keep(ctx, o.SharedPoolTLSSecretDir, o.SharedPoolTLSDir, tlsResync)
		}
		if risks, err = waitSharedFS(ctx, o, check); err != nil {
			return err
		}
	}
	po := poolOptions(o)
	storageClient := withFence(o, risks.poolKind, &po)
	p, err := pool.Open(o.PoolDir, po)
	if err != nil {
		return fmt.Errorf("open pool %s: %w", o.PoolDir, err)
	}
	// Closing releases the pool's shared lock, so the next process to open
	// it may repair what a crash left.
	defer p.Close()
	if storageClient != nil {
		// Noted before serving: the controller reads it at this node's
		// first attach (app/fence.go).
		if _, _, err := storageClient(); err != nil {
			klog.ErrorS(err, "read this node's client of the pool's filesystem")
		}
	}
	host := hostos.New(p.Dir())
	d := csi.New(csi.Config{
		DriverName:        o.DriverName,
		Version:           version.Version,
		NodeID:            o.NodeID,
		MaxVolumesPerNode: o.MaxVolumesPerNode,
		KubeletDir:        o.KubeletDir,
		DeferExpansion:    o.DeferExpansionToNode,
		CgroupRoots:       o.CgroupRoots,
		QoSResync:         o.QoSResync,
		Controller:        o.Mode == options.ModeAll || o.Mode == options.ModeController,
		Node:              o.Mode == options.ModeAll || o.Mode == options.ModeNode,
		Shared:            o.PoolShared,
		PoolName:          poolName(o, p),
		SharedUnsafe:      risks.allowed,
		StorageClient:     storageClient,
	}, p, host, imagenode.New(p, host, o.NodeID, o.PoolShared))
	defer d.Close()
	var dp *dirpool.Pool
	if o.DirPoolDir != "" {
		dp, err = dirpool.Open(o.DirPoolDir, dirpool.Options{NodeID: o.NodeID, Shared: o.PoolShared, NodeOnly: o.Mode == options.ModeNode})
		if err != nil {
			return fmt.Errorf("open directory pool %s: %w", o.DirPoolDir, err)
		}
		defer dp.Close()
		d.Serve(dp.ID(), volid.KindDir, dp, dirnode.New(dp, host, o.KubeletDir))
	}
	view := &nodeview.Builder{Node: o.NodeID, Driver: o.DriverName, Version: version.Version,
		Pool: p, Kernel: host, Health: volumeHealth(d), Warnings: risks.warnings}
	if d.Node != nil {
		view.Share = reading.WithListed
	}
	if dp != nil {
		view.DirPool, view.DirHealth = dp, dirVolumeHealth(volumeHealth(d))
	}
	m := metrics.New(metrics.Config{View: view, Snapshots: func() (int, error) { return len(p.ListSnapshots()), nil }})

	lis, err := csi.Listen(o.Endpoint)
	if err != nil {
		return err
	}
	srv := csi.NewGRPCServer(m)
	d.Register(srv)

	healthy := d.Identity.Healthy
	if o.RegistrationDir != "" {
		reg, stop, err := register(o)
		if err != nil {
			lis.Close()
			return err
		}
		defer stop()
		healthy = func() error { return errors.Join(d.Identity.Healthy(), reg.Healthy()) }
	}
	if o.HTTPEndpoint != "" {
		stop, err := serveHTTP(o.HTTPEndpoint, healthy, m, view)
		if err != nil {
			lis.Close()
			return err
		}
		defer stop()
	}
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	if dp != nil && o.Mode != options.ModeNode {
		// The garbage collector's part of the directory pool: interrupted
		// deletes, and qgroups of destroyed subvolumes (dirpool/qgroup.go).
		go dp.RunCollector(bg, o.GCInterval)
	}
	if d.Node != nil {
		go d.Node.RunGC(bg, o.GCInterval, func(r volume.GCReport) {
			m.SetOrphans(r.Orphans())
			m.SetSweepDuration(r.Took)
		})
		go d.Freeze.Run(bg)
		go d.Node.RunQoS(bg)
	}
	if err := startEvents(bg, o, view); err != nil {
		lis.Close()
		return err
	}
	klog.InfoS("filevol serving", "version", version.Version, "endpoint", o.Endpoint, "mode", o.Mode,
		"nodeID", o.NodeID, "pool", o.PoolDir, "driver", o.DriverName)
	err = csi.Serve(ctx, srv, lis, shutdownGrace)
	klog.InfoS("filevol stopped")
	return err
}

// poolOptions is how this process opens its pool. On a shared pool the
// process says who it is: a node by its node ID, a controller by its ID
// under "controller/", which no Kubernetes node name can hold, so that
// no node ever takes a controller's files for its own.
func poolOptions(o options.Options) pool.Options {
	po := pool.Options{NodeID: o.NodeID, ReservedBytes: int64(o.ReservedCapacity), Shared: o.PoolShared}
	if o.Mode == options.ModeController {
		po.Owner = "controller/" + o.ControllerID
	}
	return po
}

// register serves kubelet's plugin registration socket. The CSI socket
// path kubelet is told defaults to our own endpoint's path.
func register(o options.Options) (*registration.Server, func(), error) {
	path := o.KubeletRegistrationPath
	if path == "" {
		_, path, _ = options.ParseEndpoint(o.Endpoint)
	}
	return registration.Start(o.RegistrationDir, o.DriverName, path)
}

// poolName is a shared pool's name in its volumes' topology: --pool-name,
// or the pool's ID, which every process that opens the pool reads alike.
func poolName(o options.Options, p *pool.Pool) string {
	if o.PoolName != "" || !o.PoolShared {
		return o.PoolName
	}
	return p.ID()
}
