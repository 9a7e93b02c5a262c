// Package app assembles one filevol process from its options: it opens the
// pool, builds the CSI services for the mode, serves them on the endpoint
// and the optional health endpoint, and shuts down cleanly on cancel. It
// holds no CSI or storage logic of its own.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/registration"
	"github.com/filevol/filevol/internal/version"
)

// shutdownGrace bounds how long in-flight calls may run after SIGTERM;
// kubelet's own CSI timeouts are longer, and it retries.
const shutdownGrace = 30 * time.Second

// Run serves until ctx is cancelled, then stops accepting, finishes
// in-flight calls and removes the socket.
func Run(ctx context.Context, o options.Options) error {
	p, err := pool.Open(o.PoolDir, pool.Options{NodeID: o.NodeID, ReservedBytes: int64(o.ReservedCapacity)})
	if err != nil {
		return fmt.Errorf("open pool %s: %w", o.PoolDir, err)
	}
	d := csi.New(csi.Config{
		DriverName:        o.DriverName,
		Version:           version.Version,
		NodeID:            o.NodeID,
		MaxVolumesPerNode: o.MaxVolumesPerNode,
		KubeletDir:        o.KubeletDir,
		Controller:        o.Mode == options.ModeAll || o.Mode == options.ModeController,
		Node:              o.Mode == options.ModeAll || o.Mode == options.ModeNode,
	}, p, csi.NewOSHost())

	lis, err := csi.Listen(o.Endpoint)
	if err != nil {
		return err
	}
	srv := csi.NewGRPCServer()
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
		stop, err := serveHealth(o.HTTPEndpoint, healthy)
		if err != nil {
			lis.Close()
			return err
		}
		defer stop()
	}
	if d.Node != nil {
		gcCtx, stopGC := context.WithCancel(ctx)
		defer stopGC()
		go d.Node.RunGC(gcCtx, o.GCInterval, nil)
	}
	klog.InfoS("filevol serving", "version", version.Version, "endpoint", o.Endpoint, "mode", o.Mode,
		"nodeID", o.NodeID, "pool", o.PoolDir, "driver", o.DriverName)
	err = csi.Serve(ctx, srv, lis, shutdownGrace)
	klog.InfoS("filevol stopped")
	return err
}

// serveHealth serves /healthz: 200 "ok" when healthy() is nil, 503 with the
// reason otherwise.
func serveHealth(addr string, healthy func() error) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-endpoint %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "health endpoint stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
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
