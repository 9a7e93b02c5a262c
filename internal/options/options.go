// Package options defines filevol's command-line options: one Options struct
// with a doc comment per field, AddFlags to bind them to a FlagSet and
// Validate to check them. It imports nothing else of the project.
package options

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Modes filevol can run in.
const (
	ModeAll        = "all"
	ModeController = "controller"
	ModeNode       = "node"
)

// DefaultDriverName is the CSI driver name (CSIDriver object, StorageClass provisioner).
const DefaultDriverName = "filevol.csi.io"

// UnsafeSharedSettings are the names --shared-pool-unsafe-allow takes:
// internal/sharedfs's settings (a test in internal/app keeps them equal;
// this package imports nothing of the project).
var UnsafeSharedSettings = []string{"strict-locks", "stat-prefetch", "quick-read", "entry-timeout", "attribute-timeout", "fuse-disable-pagecache"}

// SharedRequirements are the names --shared-pool-require takes: what a
// shared pool's filesystem need not have, unless asked (internal/sharedfs:
// "tls", the client's I/O path in TLS).
var SharedRequirements = []string{"tls"}

// Options are the settings of one filevol process. Flag names are a
// contract: manifests and tools rely on them, so a rename breaks installs.
type Options struct {
	// Endpoint is where the gRPC server listens: unix:///path/csi.sock or
	// tcp://127.0.0.1:port.
	Endpoint string
	// NodeID identifies this node; it becomes the topology value of every
	// volume created here. Defaults to the host name.
	NodeID string
	// DriverName is reported by GetPluginInfo.
	DriverName string
	// PoolDir is the storage pool directory (created 0700 if missing).
	PoolDir string
	// DirPoolDir, when set, is a directory served as a directory pool
	// (internal/dirpool) beside PoolDir: StorageClasses with
	// provisioningMode: directory make their volumes there (btrfs: with a
	// quota each; elsewhere unenforced, where a class allows it). With
	// PoolShared it is shared by the nodes too. Empty: none.
	DirPoolDir string
	// PoolShared says that several hosts open PoolDir (a filesystem every
	// node mounts, with a controller Deployment beside the nodes). Nobody
	// then holds the pool alone: at start each process repairs only the
	// interrupted operations of its own owner (its node ID, or
	// ControllerID), the node's freeze marks are its own, and the garbage
	// collector quarantines an image without a record only once it is old.
	// Default false: a node-local pool, repaired whole by the process that
	// holds it alone. A pool once opened shared refuses node-local opens.
	PoolShared bool
	// SharedPoolUnsafeAllow names requirements of a shared pool's
	// filesystem (internal/sharedfs) that this process may start without:
	// a shared pool whose filesystem misses one it does not name is
	// refused at start, with the setting and its fix. Each missing one it
	// names is logged as a warning at start, on every attach, and shown
	// in the node view. Names: UnsafeSharedSettings.
	SharedPoolUnsafeAllow []string
	// SharedPoolRequire names what a shared pool's filesystem must have
	// beyond what fencing and coherence need: "tls" refuses, at start, a
	// pool whose client does not show TLS on its I/O path (only a
	// GlusterFS client shows it). Names: SharedRequirements.
	SharedPoolRequire []string
	// DirPoolRequire is the same for the directory pool (--dir-pool-dir)
	// alone: nil, as SharedPoolRequire; ["none"], nothing. A directory
	// pool may sit on another filesystem than the image pool (a local
	// btrfs standing in for a shared one, with qgroups for its sizes).
	DirPoolRequire []string
	// CephAdminSocketDirs are where the check of a shared pool on CephFS
	// looks for the ceph-fuse client's admin socket (*.asok), to read
	// fuse_disable_pagecache as the client runs it. Empty: Ceph's default
	// place, /run/ceph and /var/run/ceph (internal/sharedfs).
	CephAdminSocketDirs []string
	// SharedPoolTLSSecretDir is a mounted Secret (tls.crt, tls.key,
	// ca.crt) whose files are installed into SharedPoolTLSDir, on the
	// host, for the shared filesystem's client (internal/clienttls).
	// Empty: none.
	SharedPoolTLSSecretDir string
	// SharedPoolTLSDir is the host directory the client reads them from
	// (the volume's ssl.own-cert, ssl.private-key, ssl.ca-list).
	SharedPoolTLSDir string
	// SharedPoolWait is how long the start waits for the shared pool's
	// filesystem to meet its checks (a mount that comes up after the
	// pod, as one waiting for the files above does); 0 refuses at once.
	SharedPoolWait time.Duration
	// PoolName names a shared pool in its volumes' topology
	// (topology.filevol.csi.io/pool=<name>): every node and the
	// controller of one pool give the same. Empty: the pool's ID.
	PoolName string
	// ControllerID names a --mode controller process among the owners of
	// a shared pool: the key that tags its temporary files, which only a
	// controller of that ID repairs. Every replica of one controller
	// Deployment uses the same ID (one repairs only while no other runs),
	// so that a replica that starts elsewhere resolves what a killed one
	// left. A node (--mode node or all) is its node ID.
	ControllerID string
	// Mode selects the services served: all, controller or node.
	Mode string
	// MaxVolumesPerNode is reported by NodeGetInfo; 0 means no limit.
	MaxVolumesPerNode int64
	// ReservedCapacity is kept free in the pool and never promised by
	// GetCapacity, in bytes (suffixes Ki, Mi, Gi, Ti accepted).
	ReservedCapacity Quantity
	// KubeletDir confines every staging and target path a request names:
	// filevol never mounts over, or removes, anything outside it. Empty
	// disables the check (for tests and demos only).
	KubeletDir string
	// RegistrationDir, when set (kubelet's plugins_registry), makes filevol
	// register itself with kubelet, as node-driver-registrar would.
	RegistrationDir string
	// KubeletRegistrationPath is the CSI socket path as kubelet sees it;
	// defaults to the --endpoint socket path.
	KubeletRegistrationPath string
	// DeferExpansionToNode makes ControllerExpandVolume leave volumes that
	// are not in this process's pool to NodeExpandVolume on their node: for
	// a controller (csi-resizer's) that does not see the nodes' pools.
	DeferExpansionToNode bool
	// CgroupRoots are the cgroup hierarchies where the node looks for the
	// cgroups of the pods that use a volume, to enforce the volume's I/O
	// limits: a v1 blkio hierarchy and/or a cgroup v2 one offering the io
	// controller (those that cannot throttle are skipped). Empty: limits
	// are recorded but not enforced.
	CgroupRoots []string
	// QoSResync is how often the node re-applies every attached volume's
	// I/O limits to the pods using it: the longest a ControllerModifyVolume
	// takes to reach a running pod.
	QoSResync time.Duration
	// GCInterval is how often the node looks for orphans (loop devices
	// nothing uses, images without records, records without images).
	GCInterval time.Duration
	// HTTPEndpoint, when set (host:port), serves /healthz backed by Probe,
	// /metrics (Prometheus) and the read-only /debug/volumes. Bind it to
	// 127.0.0.1 on a host, or to the pod IP in a DaemonSet so Prometheus and
	// the API server's pod proxy (kubectl filevol) can reach it.
	HTTPEndpoint string
	// Kubeconfig, when set, is the API server filevol reports Events to;
	// empty: the in-cluster configuration inside a pod, else no events.
	Kubeconfig string
	// MonitorInterval is how often the node view is checked for things
	// to report as Events (health turned abnormal, orphans, pool nearly
	// full); only when an API server is configured. 0 disables.
	MonitorInterval time.Duration
}

// AddFlags registers the options on fs with their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&o.Endpoint, "endpoint", "unix:///var/lib/filevol/csi.sock", "CSI endpoint: unix:///path or tcp://127.0.0.1:port")
	fs.StringVar(&o.NodeID, "node-id", host, "node ID (default: the host name)")
	fs.StringVar(&o.DriverName, "driver-name", DefaultDriverName, "CSI driver name")
	fs.StringVar(&o.PoolDir, "pool-dir", "/var/lib/filevol/pool", "storage pool directory")
	fs.StringVar(&o.Mode, "mode", ModeAll, "services to serve: all, controller or node")
	fs.StringVar(&o.DirPoolDir, "dir-pool-dir", "", "a directory to serve as a directory pool (provisioningMode: directory): on btrfs a subvolume with a quota per volume, elsewhere plain directories whose size is not enforced; with --pool-shared it is shared too, mounted by every node at this path (default: none)")
	fs.BoolVar(&o.PoolShared, "pool-shared", false, "the pool directory is shared by several hosts: each process repairs, collects and thaws only what it made (default: node-local)")
	o.addSharedFlags(fs)
	fs.StringVar(&o.PoolName, "pool-name", "", "with --pool-shared: the pool's name in its volumes' topology, topology.filevol.csi.io/pool=<name> (topology.<driver name>/pool for other driver names than filevol.csi.io and shared.filevol.csi.io), the same on every node (default: the pool's ID)")
	fs.StringVar(&o.ControllerID, "controller-id", "controller", "with --mode controller on a shared pool: this controller's name among the pool's owners, the same for every replica")
	fs.Int64Var(&o.MaxVolumesPerNode, "max-volumes-per-node", 0, "maximum volumes per node reported to the CO (0: no limit)")
	fs.Var(&o.ReservedCapacity, "reserved-capacity", "pool space never promised to volumes (e.g. 1Gi)")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "staging and target paths must be inside this directory (empty: no check, for tests only)")
	fs.StringVar(&o.RegistrationDir, "registration-dir", "", "kubelet plugin registration directory, e.g. /var/lib/kubelet/plugins_registry (empty: do not register)")
	fs.StringVar(&o.KubeletRegistrationPath, "kubelet-registration-path", "", "CSI socket path as kubelet sees it (default: the --endpoint path)")
	fs.BoolVar(&o.DeferExpansionToNode, "defer-expansion-to-node", false, "controller: expand volumes not in this pool on their node (NodeExpandVolume) instead of failing")
	o.CgroupRoots = []string{"/sys/fs/cgroup/blkio", "/sys/fs/cgroup"}
	fs.Var((*pathList)(&o.CgroupRoots), "cgroup-roots", "comma-separated cgroup hierarchies searched for pods' cgroups to enforce volume I/O limits (\"\": do not enforce)")
	fs.DurationVar(&o.QoSResync, "qos-resync", time.Second, "how often the node re-applies volumes' I/O limits to the pods using them (the longest a modify takes to reach a pod)")
	fs.DurationVar(&o.GCInterval, "gc-interval", 10*time.Minute, "how often to look for orphans (also done at start)")
	fs.StringVar(&o.HTTPEndpoint, "http-endpoint", "", "host:port serving /healthz, /metrics and /debug/volumes (off when empty)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the API server to report Events to (default: in-cluster config inside a pod, else no events)")
	fs.DurationVar(&o.MonitorInterval, "monitor-interval", time.Minute, "how often volume health, orphans and pool space are checked for Events (0: never)")
}

// Validate checks the options and returns the first problem found.
func (o *Options) Validate() error {
	if _, _, err := ParseEndpoint(o.Endpoint); err != nil {
		return err
	}
	if strings.TrimSpace(o.NodeID) == "" {
		return fmt.Errorf("--node-id must not be empty")
	}
	if len(o.NodeID) > 63 {
		// It becomes a topology label value (at most 63 characters).
		return fmt.Errorf("--node-id %q is longer than 63 characters", o.NodeID)
	}
	if len(o.DriverName) > 63 || !driverName.MatchString(o.DriverName) {
		// The CSIDriver object's name (a DNS subdomain), and the prefix of a
		// shared pool's topology key (csi.PoolTopologyKeyOf).
		return fmt.Errorf("--driver-name %q must be 1 to 63 characters of lowercase letters, digits, '-' and '.', a DNS subdomain such as shared.filevol.csi.io", o.DriverName)
	}
	if o.DirPoolDir != "" && !filepath.IsAbs(o.DirPoolDir) {
		return fmt.Errorf("--dir-pool-dir %q must be an absolute path", o.DirPoolDir)
	}
	if !filepath.IsAbs(o.PoolDir) {
		return fmt.Errorf("--pool-dir %q must be an absolute path", o.PoolDir)
	}
	if o.KubeletDir != "" && !filepath.IsAbs(o.KubeletDir) {
		return fmt.Errorf("--kubelet-dir %q must be an absolute path", o.KubeletDir)
	}
	for _, r := range o.CgroupRoots {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("--cgroup-roots: %q must be an absolute path", r)
		}
	}
	if o.QoSResync <= 0 {
		return fmt.Errorf("--qos-resync %s must be positive", o.QoSResync)
	}
	if o.RegistrationDir != "" {
		if o.Mode == ModeController {
			return fmt.Errorf("--registration-dir registers a node plugin; it needs --mode all or node")
		}
		if network, addr, _ := ParseEndpoint(o.Endpoint); network != "unix" && o.KubeletRegistrationPath == "" {
			return fmt.Errorf("--registration-dir with the tcp endpoint %s needs --kubelet-registration-path", addr)
		}
	}
	if o.PoolName != "" && !labelValue.MatchString(o.PoolName) {
		return fmt.Errorf("--pool-name %q must be a Kubernetes label value: at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit", o.PoolName)
	}
	if o.PoolName != "" && !o.PoolShared {
		return fmt.Errorf("--pool-name %q names a shared pool's topology: it needs --pool-shared", o.PoolName)
	}
	if err := o.validateShared(); err != nil {
		return err
	}
	if strings.TrimSpace(o.ControllerID) == "" || len(o.ControllerID) > 253 {
		return fmt.Errorf("--controller-id %q must be 1 to 253 characters", o.ControllerID)
	}
	if o.GCInterval < time.Second {
		return fmt.Errorf("--gc-interval %s must be at least 1s", o.GCInterval)
	}
	switch o.Mode {
	case ModeAll, ModeController, ModeNode:
	default:
		return fmt.Errorf("--mode %q must be one of all, controller, node", o.Mode)
	}
	if o.MonitorInterval < 0 {
		return fmt.Errorf("--monitor-interval %s must not be negative", o.MonitorInterval)
	}
	if o.MaxVolumesPerNode < 0 {
		return fmt.Errorf("--max-volumes-per-node %d must not be negative", o.MaxVolumesPerNode)
	}
	return nil
}

// ParseEndpoint splits a CSI endpoint into a network ("unix" or "tcp") and
// an address. TCP endpoints must be on the loopback interface: the CSI
// socket has no authentication.
func ParseEndpoint(ep string) (network, addr string, err error) {
	u, err := url.Parse(ep)
	if err != nil {
		return "", "", fmt.Errorf("--endpoint %q: %v", ep, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if u.Host != "" { // unix://relative/path
			p = u.Host + u.Path
		}
		if p == "" {
			return "", "", fmt.Errorf("--endpoint %q has no socket path", ep)
		}
		return "unix", p, nil
	case "tcp":
		host := u.Hostname()
		if host != "127.0.0.1" && host != "localhost" && host != "::1" {
			return "", "", fmt.Errorf("--endpoint %q: tcp endpoints must listen on 127.0.0.1", ep)
		}
		if u.Port() == "" {
			return "", "", fmt.Errorf("--endpoint %q has no port", ep)
		}
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("--endpoint %q must start with unix:// or tcp://", ep)
}

// labelValue is a Kubernetes label value (the topology segment's value).
var driverName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

var labelValue = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// pathList is a comma-separated list (of paths, or of names) as a
// flag.Value; "" is none.
type pathList []string

// String implements flag.Value.
func (l *pathList) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *pathList) Set(s string) error {
	*l = nil
	for _, r := range strings.Split(s, ",") {
		if r = strings.TrimSpace(r); r != "" {
			*l = append(*l, r)
		}
	}
	return nil
}
