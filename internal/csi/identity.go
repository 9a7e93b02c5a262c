package csi

import (
	"context"
	"fmt"
	"os"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// IdentityService implements the CSI Identity service.
type IdentityService struct {
	csipb.UnimplementedIdentityServer
	cfg  Config
	pool ImagePool
}

// GetPluginInfo returns the driver name and the build-stamped version.
func (s *IdentityService) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: s.cfg.DriverName, VendorVersion: s.cfg.Version}, nil
}

// GetPluginCapabilities advertises the controller, group controller and
// snapshot metadata services and snapshot topology (when served), volume topology (every
// volume is reachable only from its node) and online expansion.
func (s *IdentityService) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	svc := func(t csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: t}}}
	}
	caps := []*csipb.PluginCapability{
		svc(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		// Volumes grow while published (LOOP_SET_CAPACITY, then
		// resize2fs / xfs_growfs / btrfs online).
		{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{
			Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}},
	}
	if s.cfg.Controller {
		caps = append(caps, svc(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
			// Group snapshots of the volumes of one node (group_controller.go).
			svc(csipb.PluginCapability_Service_GROUP_CONTROLLER_SERVICE),
			// A snapshot lives in its pool: restores from it are made
			// there, so it is usable only where the pool's volumes are
			// (the node's topology, or the shared pool's); every snapshot
			// says so in accessible_topology.
			svc(csipb.PluginCapability_Service_SNAPSHOT_ACCESSIBILITY_CONSTRAINTS),
			// Changed-block tracking of the snapshots in the controller's
			// pools (snapshot_metadata.go).
			svc(csipb.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE))
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready only when the pool directory is usable.
func (s *IdentityService) Probe(ctx context.Context, _ *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	if err := s.Healthy(); err != nil {
		return nil, failedPrecondition("%v", err)
	}
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// Healthy says why the pool is not usable, or nil. It backs Probe and the
// /healthz endpoint.
func (s *IdentityService) Healthy() error { return checkPoolDir(s.pool.Dir()) }

func checkPoolDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("pool directory: %v", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("pool directory %s is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("pool directory %s is not writable: %v", dir, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return fmt.Errorf("pool filesystem %s: %v", dir, err)
	}
	if sfs.Flags&unix.ST_RDONLY != 0 {
		return fmt.Errorf("pool filesystem under %s is read-only", dir)
	}
	return nil
}
