package pool

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/nodestate"
)

// open makes the layout, locks the pool, repairs interrupted operations
// when it holds the pool alone, and loads the index from the records.
func open(dir string, opts Options) (_ *Pool, err error) {
	if dir == "" {
		return nil, errors.New("open pool: empty directory")
	}
	dir = filepath.Clean(dir)
	p := &Pool{
		dir:    dir,
		vdir:   filepath.Join(dir, "volumes"),
		sdir:   filepath.Join(dir, "snapshots"),
		qdir:   filepath.Join(dir, "quarantine"),
		opts:   opts,
		lockFD: -1,
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
	for _, d := range []string{p.vdir, p.sdir, p.qdir} {
		if err := durable.EnsureDir(d); err != nil {
			return nil, fmt.Errorf("open pool: %w", err)
		}
	}
	fd, exclusive, err := lockPool(dir)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	p.lockFD = fd
	if p.ident, err = loadIdentity(dir); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if p.node, err = nodestate.Open(dir, validID); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if p.vols, err = volumeStore(p.vdir); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if p.snaps, err = snapshotStore(p.sdir); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if !exclusive {
		klog.InfoS("Pool is open in another process; leaving its temporary files alone", "dir", dir)
	}
	if err := p.load(exclusive); err != nil {
		return nil, fmt.Errorf("open pool %s: %w", dir, err)
	}
	if err := p.loadSnapshots(exclusive); err != nil {
		return nil, fmt.Errorf("open pool %s: snapshots: %w", dir, err)
	}
	if exclusive {
		if err := sharePool(p.lockFD); err != nil {
			return nil, fmt.Errorf("open pool %s: share lock: %w", dir, err)
		}
	}
	return p, nil
}

func (p *Pool) close() error {
	var errs []error
	if p.vols != nil {
		errs = append(errs, p.vols.Close())
	}
	if p.snaps != nil {
		errs = append(errs, p.snaps.Close())
	}
	if p.lockFD >= 0 {
		errs = append(errs, unix.Close(p.lockFD))
		p.lockFD = -1
	}
	return errors.Join(errs...)
}
