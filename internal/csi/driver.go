package csi

import (
	"google.golang.org/grpc"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/pool"
)

// TopologyKey is the topology segment every filevol volume carries: the
// node whose pool holds it.
const TopologyKey = "topology.filevol.csi.io/node"

// Config is what the services need to know about this process.
type Config struct {
	DriverName        string
	Version           string
	NodeID            string
	MaxVolumesPerNode int64
	// DeferExpansion makes ControllerExpandVolume leave volumes it does not
	// find in its pool to NodeExpandVolume (a controller without the nodes' pools).
	DeferExpansion bool
	// KubeletDir confines staging and target paths ("" disables the check).
	KubeletDir string
	// Controller and Node select the services served (--mode).
	Controller, Node bool
}

// Driver holds the three services. They are separate objects that share
// only the pool, the host and the per-volume locks — never one mutex
// across calls.
type Driver struct {
	Identity   *IdentityService
	Controller *ControllerService
	Node       *NodeService
}

// New builds the services for cfg. Identity is always served; the
// controller and node services only when cfg asks for them.
func New(cfg Config, p *pool.Pool, h Host) *Driver {
	locks := newInflight()
	d := &Driver{Identity: &IdentityService{cfg: cfg, pool: p}}
	if cfg.Controller {
		d.Controller = &ControllerService{cfg: cfg, pool: p, host: h, locks: locks}
		// Before serving: a predecessor killed inside a snapshot may have
		// left a pod's filesystem frozen (freeze.go).
		d.Controller.ThawLeftovers()
	}
	if cfg.Node {
		d.Node = &NodeService{cfg: cfg, pool: p, host: h, locks: locks, paths: pathPolicy{kubeletDir: cfg.KubeletDir}}
	}
	return d
}

// Register registers the services on s.
func (d *Driver) Register(s *grpc.Server) {
	csipb.RegisterIdentityServer(s, d.Identity)
	if d.Controller != nil {
		csipb.RegisterControllerServer(s, d.Controller)
	}
	if d.Node != nil {
		csipb.RegisterNodeServer(s, d.Node)
	}
}

// topology is the accessible topology of volumes on this node.
func (c Config) topology() *csipb.Topology {
	return &csipb.Topology{Segments: map[string]string{TopologyKey: c.NodeID}}
}
