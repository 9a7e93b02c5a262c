package pool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
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
		idx:    newIndex(),
		snaps:  newSnapIndex(),
		vfd:    -1,
		sfd:    -1,
		lockFD: -1,
	}
	defer func() {
		if err != nil {
			_ = p.close()
		}
	}()
	if err := ensureDir(dir); err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	// Before the subdirectories are made, where they are placed (placement.go).
	markTopDir(dir)
	for _, d := range []string{p.vdir, p.sdir, p.qdir, p.frozenDir()} {
		if err := ensureDir(d); err != nil {
			return nil, fmt.Errorf("open pool: %w", err)
		}
	}
	fd, exclusive, err := lockPool(dir)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	p.lockFD = fd
	p.alone = exclusive
	if err := ignoringEINTR(func() (err error) {
		p.vfd, err = unix.Open(p.vdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	}); err != nil {
		p.vfd = -1
		return nil, fmt.Errorf("open pool: %w", &os.PathError{Op: "open", Path: p.vdir, Err: err})
	}
	if err := ignoringEINTR(func() (err error) {
		p.sfd, err = unix.Open(p.sdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	}); err != nil {
		p.sfd = -1
		return nil, fmt.Errorf("open pool: %w", &os.PathError{Op: "open", Path: p.sdir, Err: err})
	}
	p.vsync = newDirSync(func() error { return fsync(p.vfd) })
	p.ssync = newDirSync(func() error { return fsync(p.sfd) })
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

// ensureDir makes dir with mode 0700 if missing, durably: the parent is
// fsynced, or a crash could lose the directory and every file made in it.
// An existing directory is left as it is (an operator may have chosen
// other permissions).
func ensureDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, os.ErrExist) {
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		// Parent missing: make it the same way (MkdirAll would not fsync).
		if err := ensureDir(filepath.Dir(dir)); err != nil {
			return err
		}
		err = os.Mkdir(dir, 0o700)
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// syncDir fsyncs a directory by path, for the rare paths (Open, quarantine)
// that are not worth holding a descriptor for.
func syncDir(dir string) error {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err == nil {
		err = fsync(fd)
		_ = unix.Close(fd)
	}
	if err != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}

func (p *Pool) close() error {
	var errs []error
	for _, fd := range []*int{&p.vfd, &p.sfd, &p.lockFD} {
		if *fd >= 0 {
			errs = append(errs, unix.Close(*fd))
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
