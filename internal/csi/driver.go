package csi

import (
	"errors"
	"time"

	"google.golang.org/grpc"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/freeze"
	"github.com/filevol/filevol/internal/nodestate"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// TopologyKey is the topology segment of a volume in a node-local pool:
// the node whose pool holds it.
const TopologyKey = "topology.filevol.csi.io/node"

// PoolTopologyKey is the topology key of a volume in a shared pool of
// filevol's own driver names (filevol.csi.io, shared.filevol.csi.io):
// its value is the pool's name. Every node that mounts the pool reports
// it, so the scheduler places a volume's pods only on nodes that can
// reach it. Other driver names have keys of their own (PoolTopologyKeyOf).
const PoolTopologyKey = "topology.filevol.csi.io/pool"

// PoolTopologyKeyOf is the topology key of driver's shared pool. kubelet
// keeps one value per key on a node and refuses a driver that reports
// another value for a key already there ("topology value collision"), so
// two shared pools on one node (two releases of the chart: one on
// GlusterFS, one on CephFS) need keys of their own: topology.<driver>/pool,
// as the Kubernetes convention names a driver's keys. filevol's own two
// names keep PoolTopologyKey, which the volumes they made carry in their
// PersistentVolumes' node affinity.
func PoolTopologyKeyOf(driver string) string {
	switch driver {
	case "", "filevol.csi.io", "shared.filevol.csi.io":
		return PoolTopologyKey
	}
	return "topology." + driver + "/pool"
}

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
	// Shared: the pool is one that every node mounts (--pool-shared). Its
	// volumes are attached to one node at a time by ControllerPublish
	// (CSIDriver attachRequired: true), and their topology is the pool's
	// (PoolTopologyKey=PoolName), not a node's.
	Shared   bool
	PoolName string
	// SharedUnsafe, when set, says which requirements the shared pool's
	// filesystem lacks and the operator accepted
	// (--shared-pool-unsafe-allow, internal/sharedfs): every attach logs
	// it as a warning.
	SharedUnsafe string
	// StorageClient, on a node of a shared pool whose filesystem names
	// its clients (CephFS: internal/sharedfs.ClientOf), reads this node's
	// client of the pool, which each stage records for a controller that
	// may have to evict it (controller_evict.go); nil elsewhere.
	StorageClient func() (volume.StorageClient, bool, error)
	// CgroupRoots are the cgroup hierarchies searched for pods' cgroups,
	// to enforce volumes' I/O limits (qos.go); none: limits are recorded
	// but not enforced.
	CgroupRoots []string
	// QoSResync is how often the node re-applies the limits of the
	// volumes' records to the pods using them (0: one second).
	QoSResync time.Duration
}

// Driver holds the three services. They are separate objects that share
// only the pools, the host and the per-volume locks — never one mutex
// across calls.
type Driver struct {
	Identity   *IdentityService
	Controller *ControllerService
	// GroupController serves group snapshots beside the controller.
	GroupController *GroupControllerService
	// SnapshotMetadata serves changed-block tracking beside the
	// controller, from the snapshots in its pools.
	SnapshotMetadata *SnapshotMetadataService
	Node             *NodeService
	// Freeze answers controllers' freeze requests on a node (nil without
	// the node service); whoever serves the node runs it.
	Freeze *freeze.Agent
}

// ImagePool is what the services ask of the image pool a process serves
// (internal/pool): the store of its volumes and snapshots, the ID its
// volume IDs name, and this node's state in it, where the freeze agent
// keeps its marks. Its node half is given to New beside it.
type ImagePool interface {
	VolumeStore
	ID() string
	NodeState() *nodestate.State
}

// New builds the services for cfg, serving the image volumes of the pool
// p (and the version 0 IDs, which name no pool), whose node half is img
// (internal/pool/imagenode; unused without the node service). Identity is
// always served; the controller and node services only when cfg asks for
// them. Another pool or kind is served beside p by Serve: the services do
// not change.
func New(cfg Config, p ImagePool, h Host, img NodeBackend) *Driver {
	d := &Driver{Identity: &IdentityService{cfg: cfg, pool: p}}
	// In one process the services share the per-volume locks, so that a
	// controller call and a node call never work on one volume at once
	// (the pool's contract: its callers serialise a volume's operations).
	// A freeze, which both take part in, goes through the pool all the
	// same, as it must between two processes (--mode controller, --mode
	// node), where nothing but the pool is shared.
	locks := newInflight()
	if cfg.Controller {
		d.Controller = newControllerService(cfg, p)
		d.Controller.locks = locks
		d.GroupController = &GroupControllerService{c: d.Controller}
		d.SnapshotMetadata = &SnapshotMetadataService{c: d.Controller}
		// Before serving: a killed predecessor's freeze request would keep
		// a filesystem frozen until its lease ran out.
		for _, f := range d.Controller.freezers() {
			f.CleanStale()
		}
	}
	if cfg.Node {
		d.Node = newNodeService(cfg, p, h, img)
		d.Node.locks = locks
		// Before serving: a predecessor killed while a snapshot held a
		// pod's filesystem frozen left its mark (internal/freeze).
		d.Freeze = d.Node.FreezeAgent()
		d.Freeze.ThawLeftovers()
		// Temporary records of a killed predecessor; not in every sweep,
		// which would take a stage's record in flight for one.
		for _, nv := range d.Node.vols.all {
			nv.inuse.CleanTemp(cfg.NodeID)
		}
		d.Node.reconcileBeforeServing()
	}
	return d
}

// newControllerService is the controller of the image volumes in pool p:
// their records, the nodes' in-use records and the freeze requests all
// live in p.
func newControllerService(cfg Config, p ImagePool) *ControllerService {
	s := &ControllerService{cfg: cfg, locks: newInflight()}
	s.serve(p.ID(), volid.KindImage, p)
	s.stores.addLegacy(p.ID())
	return s
}

// newNodeService is the node service of the image volumes in pool p, on
// the kernel h, whose node half is img.
func newNodeService(cfg Config, p ImagePool, h Host, img NodeBackend) *NodeService {
	s := &NodeService{cfg: cfg, pool: p, host: h, locks: newInflight(), paths: pathPolicy{kubeletDir: cfg.KubeletDir},
		qos: newQoSEnforcer(cfg.CgroupRoots)}
	s.serve(p.ID(), volid.KindImage, img)
	s.vols.addLegacy(p.ID())
	return s
}

// Serve serves the volumes of kind in the pool poolID beside the image
// pool: store on the controller, node on the node (a process without one
// of the services ignores its half). Call it before serving.
func (d *Driver) Serve(poolID string, kind volid.Kind, store VolumeStore, node NodeBackend) {
	if d.Controller != nil {
		d.Controller.serve(poolID, kind, store)
	}
	if d.Node != nil {
		d.Node.serve(poolID, kind, node)
		// As New does for the image pool: a killed predecessor's temporary
		// in-use records, and records of volumes no longer bound here.
		for _, nv := range d.Node.vols.all {
			if nv.NodeBackend == node {
				nv.inuse.CleanTemp(d.Node.cfg.NodeID)
				d.Node.reconcile(nv, true, nil)
			}
		}
	}
}

// Close releases what the services hold open in the pools (the
// controller's freeze owner locks), so that the pools' filesystems can be
// unmounted. Call it once the server has stopped.
func (d *Driver) Close() error {
	if d.Controller == nil {
		return nil
	}
	var errs []error
	for _, f := range d.Controller.freezers() {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// Register registers the services on s.
func (d *Driver) Register(s *grpc.Server) {
	csipb.RegisterIdentityServer(s, d.Identity)
	if d.Controller != nil {
		csipb.RegisterControllerServer(s, d.Controller)
		csipb.RegisterGroupControllerServer(s, d.GroupController)
		csipb.RegisterSnapshotMetadataServer(s, d.SnapshotMetadata)
	}
	if d.Node != nil {
		csipb.RegisterNodeServer(s, d.Node)
	}
}

// topology is the accessible topology of volumes on this node.
func (c Config) topology() *csipb.Topology {
	k, v := c.topologySegment()
	return &csipb.Topology{Segments: map[string]string{k: v}}
}

// topologySegment is the one segment of this process's volumes: the
// node's for a node-local pool, the pool's for a shared one.
func (c Config) topologySegment() (key, value string) {
	if c.Shared {
		return PoolTopologyKeyOf(c.DriverName), c.PoolName
	}
	return TopologyKey, c.NodeID
}
