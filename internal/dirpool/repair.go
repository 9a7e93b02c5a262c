package dirpool

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// repair resolves what a crash left (doc.go), at an open that holds the
// pool alone.
func (p *Pool) repair() error {
	tmps, tmp, err := p.listMeta(tmpDir)
	if err != nil {
		return err
	}
	defer unix.Close(tmp)
	for _, id := range tmps {
		v, err := p.vols.Get(id)
		if err != nil {
			// No record (or not an ID): a create before its commit.
			klog.InfoS("Destroying the subvolume of a create that did not commit", "name", id)
			if err := p.quota.destroy(tmp, id); err != nil {
				return err
			}
			continue
		}
		parent, _, err := p.makeParents(v.Path)
		if err != nil {
			return err
		}
		err = p.placeAt(tmp, id, parent, v.Path)
		if errors.Is(err, unix.EEXIST) && p.removeStaleClaim(parent, path.Base(v.Path)) {
			err = p.placeAt(tmp, id, parent, v.Path) // a claim a crash left (rename.go)
		}
		_ = unix.Close(parent)
		if err != nil {
			return fmt.Errorf("roll create of %s forward to %s: %w", id, v.Path, err)
		}
		klog.InfoS("Rolled an interrupted create forward", "volumeID", id, "path", v.Path)
	}
	// A record whose subvolume is in the trash (or taken from it to be
	// destroyed): a delete after its rename.
	trashed, err := p.entries(trashDir)
	if err != nil {
		return err
	}
	destroying, err := p.entries(destroyingDir)
	if err != nil {
		return err
	}
	trashed = append(trashed, destroying...)
	if held, err := p.entries(heldDir); err == nil {
		trashed = append(trashed, held...) // held for its snapshots (snap_ceph.go)
	}
	inTrash := map[string]bool{}
	for _, n := range trashed {
		id, _, _ := strings.Cut(n, ".")
		inTrash[id] = true
	}
	mark := p.vols.Mark()
	removed := false
	for _, v := range p.vols.List() {
		if !inTrash[v.ID] {
			continue
		}
		if fd, err := p.openVolume(v); err == nil {
			_ = unix.Close(fd)
			continue // the volume is in place; the trash holds an older one of its name
		}
		klog.InfoS("Finishing an interrupted delete", "volumeID", v.ID)
		if err := p.vols.Remove(v.ID); err != nil {
			return err
		}
		removed = true
	}
	if removed {
		if err := p.vols.Synced(mark); err != nil {
			return err
		}
	}
	return unix.Syncfs(p.root)
}
