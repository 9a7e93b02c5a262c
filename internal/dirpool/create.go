package dirpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/volume"
)

// Create makes the directory volume req asks for (doc.go: the steps and
// what a crash between them leaves). req.Parameters are validated here
// (Parameters); the caller serialises operations on one name.
func (p *Pool) Create(ctx context.Context, req volume.CreateRequest) (volume.Volume, error) {
	if req.Name == "" || len(req.Name) > volume.MaxNameLen || req.CapacityBytes <= 0 {
		return volume.Volume{}, fmt.Errorf("%w: name %d bytes, capacity %d", volume.ErrInvalidArgument, len(req.Name), req.CapacityBytes)
	}
	params, err := Parameters(req.Parameters)
	if err != nil {
		return volume.Volume{}, err
	}
	id := p.VolumeID(req.Name)
	rel, err := params.Path(req.Name, id)
	if err != nil {
		return volume.Volume{}, err
	}
	if err := p.quota.checkCreate(params, rel, req.Source != nil); err != nil {
		return volume.Volume{}, err
	}
	gid, allocated, err := p.reserveGID(params)
	if err != nil {
		return volume.Volume{}, err
	}
	defer p.releaseReservation(gid, allocated)
	uid := gid
	if params.HasUID {
		uid = params.UID
	}
	v := Volume{Version: recordVersion, ID: id, Name: req.Name, CapacityBytes: req.CapacityBytes,
		RequestedBytes: req.RequestedBytes, Parameters: req.Parameters, Path: rel, UID: uid, GID: gid,
		GIDAllocated: allocated, Mode: params.Perms, ContentSource: req.Source, Node: p.node,
		CreatedAt: time.Now().UTC()}
	if err := p.create(ctx, &v); err != nil {
		return volume.Volume{}, err
	}
	klog.V(2).InfoS("directory volume created", "volumeID", id, "path", rel, "uid", uid, "gid", gid, "bytes", v.CapacityBytes)
	return v.common(), nil
}

// create makes v's subvolume and record; v.Subvolume is filled in.
func (p *Pool) create(ctx context.Context, v *Volume) (err error) {
	tmp, err := p.metaFD(tmpDir)
	if err != nil {
		return err
	}
	defer unix.Close(tmp)
	// A failed earlier attempt of this create left its subvolume: start over.
	if err := p.quota.destroy(tmp, v.ID); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := p.quota.makeVolume(tmp, v); err != nil {
		// What it made before it failed (a copy refused half-way).
		if derr := p.quota.destroy(tmp, v.ID); derr != nil && !errors.Is(derr, unix.ENOENT) {
			klog.ErrorS(derr, "Failed create left a subvolume; the next open destroys it", "volumeID", v.ID)
		}
		return err
	}
	made := true
	defer func() {
		if made && err != nil {
			if derr := p.quota.destroy(tmp, v.ID); derr != nil {
				klog.ErrorS(derr, "Failed create left a subvolume; the next open destroys it", "volumeID", v.ID)
			}
			p.removeParents(v.Path) // those it made, if empty (parents.go)
		}
	}()
	if err := ctx.Err(); err != nil {
		return err
	}
	parent, _, err := p.makeParents(v.Path)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	// The subvolume is complete and durable before its record commits.
	if err := unix.Syncfs(p.root); err != nil {
		return err
	}
	draft, err := p.vols.Prepare(*v)
	if err != nil {
		return err
	}
	if err := draft.Commit(); err != nil {
		draft.Abandon()
		return err
	}
	if err := p.placeAt(tmp, v.ID, parent, v.Path); err != nil {
		draft.Abandon()
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %s is taken: another volume or something else is there (set %s to true, or choose another %s)",
				ErrDirectoryExists, v.Path, ParamEnsureUnique, ParamSubPathPattern)
		}
		return fmt.Errorf("rename subvolume into place at %s: %w", v.Path, err)
	}
	made = false
	if err := unix.Syncfs(p.root); err != nil {
		return err // the record stays; the next open rolls it forward
	}
	return draft.Durable()
}

// ownVolume gives the new volume's root fd its owner and mode.
func ownVolume(fd int, v Volume) error {
	if err := unix.Fchown(fd, int(v.UID), int(v.GID)); err != nil {
		return fmt.Errorf("chown the volume's directory to %d:%d: %w", v.UID, v.GID, err)
	}
	// After the chown, which clears the setgid bit.
	if err := unix.Fchmod(fd, v.Mode); err != nil {
		return fmt.Errorf("chmod the volume's directory to %o: %w", v.Mode, err)
	}
	return nil
}

// openSource opens the root of a clone's source: a snapshot or a volume.
func (p *Pool) openSource(src *volume.ContentSource) (int, error) {
	switch src.Kind {
	case volume.SourceSnapshot:
		s, err := p.snapshotRecord(src.ID)
		if err != nil {
			return -1, err
		}
		return p.openSnapshot(s)
	case volume.SourceVolume:
		v, err := p.Record(src.ID)
		if err != nil {
			return -1, err
		}
		return p.openVolume(v)
	}
	return -1, fmt.Errorf("%w: content source of kind %q", volume.ErrInvalidArgument, src.Kind)
}

// Expand raises the volume's limit to size, online: nothing on a
// node needs to change. The same size is success; less is ErrShrink.
func (p *Pool) Expand(_ context.Context, id string, size, requested int64) (volume.Volume, error) {
	v, err := p.Record(id)
	if err != nil {
		return volume.Volume{}, err
	}
	if err := volume.CheckGrow(id, v.CapacityBytes, size); err != nil {
		return volume.Volume{}, err
	}
	if size == v.CapacityBytes {
		return v.common(), nil
	}
	fd, err := p.openVolume(v)
	if err != nil {
		return volume.Volume{}, err
	}
	defer unix.Close(fd)
	// Limit first, record second: a crash between leaves a limit above
	// the record, which a retried expansion raises to the same value.
	if err := p.quota.setLimit(fd, v, size); err != nil {
		return volume.Volume{}, err
	}
	if err := unix.Syncfs(p.root); err != nil {
		return volume.Volume{}, err
	}
	v.CapacityBytes = size
	if requested > 0 {
		v.RequestedBytes = requested
	}
	if err := p.vols.Replace(v); err != nil {
		return volume.Volume{}, err
	}
	return v.common(), nil
}
