package dirpool

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// Sentinel errors; each is of a class (volume.NewError) that gives its
// gRPC code.
var (
	// ErrNotBtrfs: the pool directory is not on btrfs, or its quotas
	// cannot be enabled.
	ErrNotBtrfs = volume.NewError(volume.ClassPrecondition, "directory pool needs btrfs with quotas")
	// ErrInvalidParameter: a StorageClass parameter of a directory volume
	// is unknown or malformed.
	ErrInvalidParameter = volume.NewError(volume.ClassInvalid, "invalid directory volume parameter")
	// ErrInvalidPath: a path made of the parameters or the claim's names
	// could leave the pool or is not a plain relative path.
	ErrInvalidPath = volume.NewError(volume.ClassInvalid, "invalid directory volume path")
	// ErrGIDRangeExhausted: every gid of the range is held by a live volume.
	ErrGIDRangeExhausted = volume.NewError(volume.ClassExhausted, "gid range exhausted")
	// ErrDirectoryExists: the volume's directory is taken (by another
	// volume, or by something that is not a volume).
	ErrDirectoryExists = volume.NewError(volume.ClassExists, "directory already exists")
	// ErrNotVolume: what is at a volume's path is not its subvolume (it
	// was replaced, or moved): the pool refuses to touch it.
	ErrNotVolume = volume.NewError(volume.ClassPrecondition, "not the volume's subvolume")
)

const (
	metaDir       = ".filevol"
	recordVersion = 1
	identityFile  = "pool.json"
	tmpDir        = "tmp"
	trashDir      = "trash"
	// destroyingDir holds what the collector took from the trash to
	// destroy (destroyTrashed).
	destroyingDir = "destroying"
	volumesDir    = "volumes"
)

// Options configures Open.
type Options struct {
	NodeID string
	// Shared: every node mounts the pool (--pool-shared); the node says
	// so in it (poolowner.Announce), so that ControllerPublishVolume
	// knows it.
	Shared bool
	// NodeOnly: this process serves the node half only. It never
	// repairs and runs no collector: creates and deletes are the
	// controller's, and on a shared pool a node on another host would
	// otherwise take a create in flight for a crash's leftover.
	NodeOnly bool
	// GuardInterval is how often the quota guard (guard.go) looks for
	// subvolumes a pod made outside its volume's quota: 0 means
	// DefaultGuardInterval, < 0 no guard (tests that call GuardPass).
	// A NodeOnly process runs none: the controller's does.
	GuardInterval time.Duration
}

// Pool is an open directory pool.
type Pool struct {
	dir, id, uuid string
	node          string
	root          int // the pool's directory, held open
	rootDev       uint64
	lockFD        int
	quota         quota       // how sizes are enforced, chosen at Open (quota.go)
	snapper       snapshotter // where snapshots live, chosen with it (snapshotter.go)
	vols          *recordstore.Store[Volume]
	snaps         *recordstore.Store[volume.Snapshot]

	mu       sync.Mutex
	reserved map[uint32]bool // gids handed out to creates in flight
	// trashMu serialises EmptyTrash: the background collector and the
	// garbage collector (or a test) destroying one tree at once race on
	// its nested subvolumes (ENOENT, ENOTEMPTY).
	trashMu sync.Mutex

	collectorOff atomic.Bool
	wake         chan struct{}
	stop         chan struct{}
	done         chan struct{}

	guardMu     sync.Mutex
	repairs     map[string][]Repair // volume ID → the guard's latest repairs
	repairCount map[string]int
	guardDone   chan struct{}
}

// Open opens (or makes) the directory pool in dir. On btrfs, quotas are
// enabled if they are off; on any other filesystem the pool is plain
// (plain.go: no quota, sizes unenforced where a class allows it). When no
// other process has the pool open, it repairs what a crash left (doc.go).
func Open(dir string, o Options) (_ *Pool, err error) {
	dir = filepath.Clean(dir)
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return nil, err
	}
	for _, d := range []string{metaDir, metaDir + "/" + volumesDir, metaDir + "/" + tmpDir, metaDir + "/" + trashDir, metaDir + "/" + destroyingDir, metaDir + "/" + qgroupsDir} {
		if err := durable.EnsureDir(filepath.Join(dir, d)); err != nil {
			return nil, err
		}
	}
	p := &Pool{dir: dir, node: o.NodeID, root: -1, lockFD: -1, reserved: map[uint32]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		repairs: map[string][]Repair{}, repairCount: map[string]int{}, guardDone: make(chan struct{})}
	defer func() {
		if err != nil {
			p.closeFDs()
		}
	}()
	if p.root, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(p.root, &st); err != nil {
		return nil, err
	}
	p.rootDev = st.Dev
	if p.quota, p.snapper, err = openQuota(p, int64(sfs.Type)); err != nil {
		return nil, err
	}
	if p.id, err = loadIdentity(filepath.Join(dir, metaDir, identityFile)); err != nil {
		return nil, err
	}
	if p.lockFD, err = unix.Open(filepath.Join(dir, metaDir, ".lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600); err != nil {
		return nil, err
	}
	if o.Shared {
		if err := poolowner.Announce(dir, o.NodeID); err != nil {
			return nil, err
		}
	}
	alone := !o.NodeOnly && unix.Flock(p.lockFD, unix.LOCK_EX|unix.LOCK_NB) == nil
	p.vols, err = recordstore.Open(recordstore.Config[Volume]{
		Dir: filepath.Join(dir, metaDir, volumesDir), Kind: "directory volume", Version: recordVersion,
		Valid: validID, NotFound: volume.ErrNotFound, Exists: volume.ErrAlreadyExists,
		Weight: func(v Volume) int64 { return v.CapacityBytes },
	})
	if err != nil {
		return nil, err
	}
	if err := p.openSnapshotStore(); err != nil {
		p.vols.Close()
		return nil, err
	}
	if err := p.load(alone); err != nil {
		p.closeStores()
		return nil, err
	}
	// Shared while the pool is open; a repair elsewhere is waited out by
	// asking anew, never in the kernel (durable.WaitLock says why).
	err = durable.ShareFlock(p.lockFD, func() {
		klog.InfoS("Waiting for the directory pool's lock: another process holds it to repair the pool", "pool", dir)
	})
	if err != nil {
		p.closeStores()
		return nil, err
	}
	if o.NodeOnly {
		p.collectorOff.Store(true)
		close(p.done)
		close(p.guardDone)
		return p, nil
	}
	go p.collect()
	p.kick()
	switch interval := o.GuardInterval; {
	case !p.quota.guarded() || interval < 0:
		close(p.guardDone)
	case interval == 0:
		go p.runGuard(DefaultGuardInterval)
	default:
		go p.runGuard(interval)
	}
	return p, nil
}

// load reads the records and, when the pool is held alone, repairs.
func (p *Pool) load(alone bool) error {
	if _, err := p.vols.Load(alone); err != nil {
		return err
	}
	if _, err := p.snaps.Load(alone); err != nil {
		return err
	}
	if !alone {
		return nil
	}
	if err := p.repairSnapshots(); err != nil {
		return fmt.Errorf("repair directory pool %s: %w", p.dir, err)
	}
	if err := p.repair(); err != nil {
		return fmt.Errorf("repair directory pool %s: %w", p.dir, err)
	}
	return nil
}

func (p *Pool) closeStores() {
	p.vols.Close()
	p.snaps.Close()
}

// validID accepts the IDs of directory volumes only.
func validID(id string) error {
	v, err := volid.ParseVolume(id)
	if err != nil {
		return err
	}
	if v.Kind != volid.KindDir {
		return fmt.Errorf("%w: %s is not a directory volume", volid.ErrInvalid, id)
	}
	return nil
}

// Close stops the background deleter and releases the pool.
func (p *Pool) Close() error {
	close(p.stop)
	<-p.done
	<-p.guardDone
	p.closeStores()
	p.closeFDs()
	return nil
}

func (p *Pool) closeFDs() {
	for _, fd := range []*int{&p.root, &p.lockFD} {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
}

// Dir is the pool's directory; the in-use records and freeze requests of
// the controller and nodes live under it.
func (p *Pool) Dir() string { return p.dir }

// ID is the pool's ID, part of every volume ID it gives.
func (p *Pool) ID() string { return p.id }

// VolumeID is the ID of the volume called name.
func (p *Pool) VolumeID(name string) string { return volid.NewVolume(volid.KindDir, p.id, name) }

// SnapshotID is the ID of the snapshot called name.
func (p *Pool) SnapshotID(name string) string { return volid.NewSnapshot(p.id, name) }

// Known reports whether the index holds the volume.
func (p *Pool) Known(id string) bool { return p.vols.Has(id) }

// Record returns the volume's record.
func (p *Pool) Record(id string) (Volume, error) {
	if err := validID(id); err != nil {
		return Volume{}, fmt.Errorf("%w: %v", volume.ErrNotFound, err)
	}
	return p.vols.Get(id)
}

// Get returns the volume as the services see it.
func (p *Pool) Get(id string) (volume.Volume, error) {
	v, err := p.Record(id)
	if err != nil {
		return volume.Volume{}, err
	}
	return v.common(), nil
}

// GetByName returns the volume called name.
func (p *Pool) GetByName(name string) (volume.Volume, error) { return p.Get(p.VolumeID(name)) }

// List lists the volumes in ID order.
func (p *Pool) List() []volume.Volume {
	var out []volume.Volume
	for _, v := range p.vols.List() {
		out = append(out, v.common())
	}
	return out
}

// Capacity is statfs of the pool's filesystem. Volumes are thin: their
// quotas together may promise more than the filesystem holds
// (ProvisionedBytes says how much).
func (p *Pool) Capacity() (volume.Capacity, error) {
	var s unix.Statfs_t
	if err := unix.Fstatfs(p.root, &s); err != nil {
		return volume.Capacity{}, err
	}
	free := int64(s.Bavail) * s.Bsize
	return volume.Capacity{TotalBytes: int64(s.Blocks) * s.Bsize, FreeBytes: free, AvailableBytes: free,
		ProvisionedBytes: p.vols.Total()}, nil
}

// ImageLost reports whether the volume's subvolume is gone.
func (p *Pool) ImageLost(id string) bool {
	v, err := p.Record(id)
	if err != nil {
		return false
	}
	fd, err := p.openVolume(v)
	if err != nil {
		return true
	}
	_ = unix.Close(fd)
	return false
}

// SyncFS commits the pool filesystem's transaction, so that usage is current.
func (p *Pool) SyncFS() error { return unix.Syncfs(p.root) }
