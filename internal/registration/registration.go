// Package registration registers filevol with kubelet through the plugin
// registration API (k8s.io/kubelet/pkg/apis/pluginregistration/v1): the job
// node-driver-registrar does as a sidecar, built in so that clusters which
// cannot pull that image, and this project's own e2e cluster, need no
// sidecar. kubelet's plugin watcher finds <dir>/<driver>-reg.sock, calls
// GetInfo to learn the CSI socket, and reports the outcome through
// NotifyRegistrationStatus. It imports nothing else of the project.
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// supportedVersions are the CSI versions filevol speaks, as kubelet expects
// them ("1.0.0" stands for the v1 API line).
var supportedVersions = []string{"1.0.0"}

// Server answers kubelet's plugin watcher.
type Server struct {
	regapi.UnimplementedRegistrationServer
	driverName string
	endpoint   string // CSI socket path as kubelet sees it

	mu     sync.Mutex
	status error // last registration failure kubelet reported; nil when registered or not yet told
	told   bool
}

// GetInfo tells kubelet who we are and where the CSI socket is.
func (s *Server) GetInfo(context.Context, *regapi.InfoRequest) (*regapi.PluginInfo, error) {
	return &regapi.PluginInfo{
		Type: regapi.CSIPlugin, Name: s.driverName, Endpoint: s.endpoint, SupportedVersions: supportedVersions,
	}, nil
}

// NotifyRegistrationStatus records kubelet's verdict. A failure is logged
// with kubelet's reason and surfaces through Healthy, so a liveness probe
// restarts a driver kubelet refused.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *regapi.RegistrationStatus) (*regapi.RegistrationStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.told = true
	if st.GetPluginRegistered() {
		s.status = nil
		klog.InfoS("registered with kubelet", "driver", s.driverName, "endpoint", s.endpoint)
	} else {
		s.status = fmt.Errorf("kubelet refused the registration of %s: %s", s.driverName, st.GetError())
		klog.ErrorS(nil, "kubelet refused the registration", "driver", s.driverName, "reason", st.GetError())
	}
	return &regapi.RegistrationStatusResponse{}, nil
}

// Healthy returns kubelet's last refusal, or nil.
func (s *Server) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Registered reports whether kubelet confirmed the registration.
func (s *Server) Registered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.told && s.status == nil
}

// SocketPath is where the registration socket for driverName lives in dir.
func SocketPath(dir, driverName string) string {
	return filepath.Join(dir, driverName+"-reg.sock")
}

// Start serves the registration socket in dir until stop is called; stop
// removes the socket, which makes kubelet deregister the driver.
func Start(dir, driverName, csiSocket string) (srv *Server, stop func(), err error) {
	if !filepath.IsAbs(csiSocket) {
		return nil, nil, fmt.Errorf("kubelet registration path %q must be absolute", csiSocket)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, err
	}
	sock := SocketPath(dir, driverName)
	if st, err := os.Lstat(sock); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, nil, fmt.Errorf("%s exists and is not a socket; refusing to remove it", sock)
		}
		_ = os.Remove(sock)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, fmt.Errorf("registration socket: %w", err)
	}
	srv = &Server{driverName: driverName, endpoint: csiSocket}
	g := grpc.NewServer()
	regapi.RegisterRegistrationServer(g, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			klog.ErrorS(err, "registration server stopped")
		}
	}()
	klog.InfoS("waiting for kubelet to register the driver", "socket", sock, "csiEndpoint", csiSocket)
	return srv, func() {
		g.Stop()
		<-done
		_ = os.Remove(sock)
	}, nil
}
