package pool

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/nodestate"
	"github.com/filevol/filevol/internal/poolowner"
	"github.com/filevol/filevol/internal/recordstore"
)

// open makes the layout, locks the pool, repairs interrupted operations
// when it holds the pool alone (on a shared pool: its owner's, when no
// other process of the owner has it open), and loads the index from the
// records.
func open(dir string, opts Options) (_ *Pool, err error) {
	if dir == "" {
		return nil, errors.New("open pool: empty directory")
	}
	dir = filepath.Clean(dir)
	p := &Pool{
		dir:     dir,
		vdir:    filepath.Join(dir, "volumes"),
		sdir:    filepath.Join(dir, "snapshots"),
		qdir:    filepath.Join(dir, "quarantine"),
		gdir:    filepath.Join(dir, "groups"),
		opts:    opts,
		lockFD:  -1,
		ownerFD: -1,
	}
	defer func() {
		if err != nil {
			_ = p.close()
		}
	}()
	if err := durable.EnsureDir(dir); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	// Before the subdirectories are made, where they are placed (placement.go).
	markTopDir(dir)
	for _, d := range []string{p.vdir, p.sdir, p.qdir, p.gdir} {
		if err := durable.EnsureDir(d); err != nil {
			return nil, fmt.Errorf("open pool: %w", err)
		}
	}
	fd, alone, err := lockPool(dir)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	p.lockFD = fd
	if p.ident, err = openIdentity(dir, opts.Shared); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	// repair: no other process that may own a leftover has the pool open.
	repair := alone
	if opts.Shared {
		// The flock says nothing of the other hosts: repair goes by the
		// owner lock instead, and the flock is only held shared (it keeps
		// an older, node-local build on this host from repairing).
		if alone {
			if err := sharePool(p.lockFD, dir); err != nil {
				return nil, fmt.Errorf("open pool %s: share lock: %w", dir, err)
			}
		}
		if repair, err = p.openOwner(); err != nil {
			return nil, fmt.Errorf("open pool %s: %w", dir, err)
		}
	} else if p.node, err = nodestate.Open(dir, validID); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if p.vols, err = volumeStore(p.vdir, p.key()); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if p.snaps, err = snapshotStore(p.sdir, p.key()); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if p.groups, err = groupStore(p.gdir, p.key()); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	switch {
	case !repair && opts.Shared:
		klog.InfoS("Pool is open in another process of this owner; leaving the owner's temporary files alone",
			"dir", dir, "owner", p.owner())
	case !repair:
		klog.InfoS("Pool is open in another process; leaving its temporary files alone", "dir", dir)
	}
	if err := p.load(repair); err != nil {
		return nil, fmt.Errorf("open pool %s: %w", dir, err)
	}
	if err := p.loadSnapshots(repair); err != nil {
		return nil, fmt.Errorf("open pool %s: snapshots: %w", dir, err)
	}
	// Group records only: a group's members are snapshots, repaired above.
	if _, err := p.groups.Load(repair); err != nil {
		return nil, fmt.Errorf("open pool %s: group snapshots: %w", dir, err)
	}
	switch {
	case repair && opts.Shared:
		if err := p.node.AdoptLegacyFrozen(p.nodeOf); err != nil {
			return nil, fmt.Errorf("open pool %s: %w", dir, err)
		}
		if err := shareOwner(p.ownerFD); err != nil {
			return nil, fmt.Errorf("open pool %s: share owner lock: %w", dir, err)
		}
	case repair:
		if err := sharePool(p.lockFD, dir); err != nil {
			return nil, fmt.Errorf("open pool %s: share lock: %w", dir, err)
		}
	}
	return p, nil
}

// openOwner takes the owner lock of a shared pool and opens the node
// state kept in the owner's directory: exclusive reports whether no
// other process of the owner has the pool open (lock.go).
func (p *Pool) openOwner() (exclusive bool, err error) {
	key := poolowner.Key(p.owner())
	p.tag = recordstore.Tag(key)
	if p.ownerFD, exclusive, err = lockOwner(p.dir, p.owner()); err != nil {
		return false, err
	}
	if p.node, err = nodestate.OpenShared(p.dir, poolowner.Dir(p.dir, key), validID); err != nil {
		return false, err
	}
	klog.InfoS("Pool is shared: repair touches only this owner's files", "dir", p.dir, "owner", p.owner(), "key", key)
	return exclusive, nil
}

// owner is the name of this Pool's owner (Options.Owner).
func (p *Pool) owner() string {
	if p.opts.Owner != "" {
		return p.opts.Owner
	}
	return p.opts.NodeID
}

// key is the owner key that tags this Pool's temporary files: "" on a
// node-local pool, whose files carry none.
func (p *Pool) key() string { return strings.TrimPrefix(p.tag, recordstore.OwnerSep) }

// nodeOf reports whether the record of volume id names this node: on a
// pool that was node-local once, the node that set its freeze mark.
func (p *Pool) nodeOf(id string) bool {
	v, ok := p.vols.Cached(id)
	return ok && v.Node == p.opts.NodeID
}

func (p *Pool) close() error {
	var errs []error
	if p.vols != nil {
		errs = append(errs, p.vols.Close())
	}
	if p.snaps != nil {
		errs = append(errs, p.snaps.Close())
	}
	if p.groups != nil {
		errs = append(errs, p.groups.Close())
	}
	if p.lockFD >= 0 {
		errs = append(errs, unix.Close(p.lockFD))
		p.lockFD = -1
	}
	if p.ownerFD >= 0 {
		errs = append(errs, unix.Close(p.ownerFD))
		p.ownerFD = -1
	}
	return errors.Join(errs...)
}
