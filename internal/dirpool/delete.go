package dirpool

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/volume"
)

// Delete removes the volume: its subvolume is renamed into the trash
// (durably), then its record removed (the commit point); the background
// deleter destroys the subvolume. A missing volume is success. What is
// at the volume's path is checked to be its subvolume first: a directory
// that replaced it is refused (ErrNotVolume), never deleted. A volume
// of a class with deleteDirectory: "false" keeps its directory instead
// (retain.go): only its record, gid and quota are released. The
// directories the volume's create made above it go once empty.
func (p *Pool) Delete(_ context.Context, id string) error {
	v, err := p.Record(id)
	if errors.Is(err, volume.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	retained := false
	if params, perr := Parameters(v.Parameters); perr == nil && params.Retain {
		retained, err = true, p.retain(v, params)
	} else {
		err = p.trash(v.Path, v)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	mark := p.vols.Mark()
	if err := p.vols.Remove(id); err != nil {
		return err
	}
	if err := p.vols.Synced(mark); err != nil {
		return err
	}
	if !retained {
		p.removeParents(v.Path) // the directories its create made, once empty (parents.go)
	}
	p.kick()
	klog.V(2).InfoS("directory volume deleted", "volumeID", id, "path", v.Path)
	return nil
}

// trash renames the subvolume at rel (checked against v when v.ID is set)
// into the trash, durably. ENOENT when nothing is there.
func (p *Pool) trash(rel string, v Volume) error {
	dir, name := path.Split(rel)
	parent, err := openBeneathOrRoot(p.root, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	fd, err := openBeneath(parent, name)
	if err != nil {
		return err
	}
	err = p.quota.isVolume(fd, v)
	if err == nil {
		// A pod's read-only or immutable volume cannot be moved (its ".."
		// changes): the protection goes first (protect_linux.go).
		err = p.quota.readyToMove(fd)
	}
	// A volume whose snapshots live inside it (CephFS) is held, not
	// trashed, while they do (snap_ceph.go).
	to, toName := trashDir, v.ID+"."+randomSuffix()
	if err == nil {
		var keep bool
		if keep, err = p.snapper.keep(fd); keep {
			to, toName = heldDir, heldName(v, fd)
		}
	}
	_ = unix.Close(fd)
	if err != nil {
		return err
	}
	trash, err := p.metaFD(to)
	if err != nil {
		return err
	}
	defer unix.Close(trash)
	if err := renameDirNoReplace(parent, name, trash, toName); err != nil {
		return fmt.Errorf("move %s to %s: %w", rel, to, err)
	}
	return unix.Syncfs(p.root)
}

func openBeneathOrRoot(root int, rel string) (int, error) {
	if rel == "" {
		return unix.Dup(root)
	}
	return openBeneath(root, rel)
}

// stopCollector stops the background deleter (tests: to leave the trash
// as a kill would).
func (p *Pool) stopCollector() {
	p.collectorOff.Store(true)
}

// kick wakes the background deleter.
func (p *Pool) kick() {
	if p.collectorOff.Load() {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// collect destroys what is in the trash whenever woken, until Close.
func (p *Pool) collect() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
			waiting, err := p.emptyTrash()
			if err != nil {
				klog.ErrorS(err, "Emptying the directory pool's trash", "pool", p.dir)
			}
			if waiting > 0 {
				// The kernel's cleaner drops destroyed subvolumes in the
				// background; their qgroups can go once it has.
				time.AfterFunc(qgroupRetry, p.kick)
			}
		}
	}
}

// RunCollector wakes the background deleter every interval until ctx
// ends: the garbage collector's sweep of the trash and of the qgroups due
// to go, besides the wake-ups deletes give it.
func (p *Pool) RunCollector(ctx context.Context, interval time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
			p.kick()
		}
	}
}

// EmptyTrash destroys every subvolume in the trash: the end of deletes,
// interrupted ones included (the garbage collector's part).
func (p *Pool) EmptyTrash() error {
	_, err := p.emptyTrash()
	return err
}

// qgroupRetry is how long the collector waits before it looks again for
// qgroups whose subvolumes the kernel's cleaner has not dropped yet.
const qgroupRetry = 2 * time.Second

// emptyTrash is EmptyTrash, and it also destroys the qgroups due to go
// (sweepQgroups): it returns how many wait for the kernel's cleaner.
func (p *Pool) emptyTrash() (int, error) {
	p.trashMu.Lock()
	defer p.trashMu.Unlock()
	names, trash, err := p.listMeta(trashDir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(trash)
	aside, err := p.metaFD(destroyingDir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(aside)
	var errs []error
	// What a collector killed while destroying left goes first.
	left, err := p.entries(destroyingDir)
	if err != nil {
		return 0, err
	}
	for _, n := range left {
		errs = append(errs, p.quota.destroy(aside, n))
	}
	// A plain pool's removal moves the deep parts of a tree to the top of
	// the trash (removeTree): a pass removes them, until one finds nothing
	// new to remove.
	for seen := map[string]bool{}; len(names) > 0; {
		for _, n := range names {
			seen[n] = true
			if err := p.quota.destroyTrashed(trash, aside, n); err != nil {
				errs = append(errs, err)
			}
		}
		all, err := p.entries(trashDir)
		if err != nil {
			return 0, err
		}
		names = names[:0]
		for _, n := range all {
			if !seen[n] {
				names = append(names, n)
			}
		}
	}
	errs = append(errs, p.sweepSnapshots(), p.snapper.tidy())
	waiting, err := p.sweepQgroups()
	return waiting, errors.Join(append(errs, err)...)
}
