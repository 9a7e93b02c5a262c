package csi

import (
	"context"
	"errors"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/volume"
)

// createFromSource is CreateVolume with a volume_content_source: a restore
// of a snapshot or a clone of a volume (CLONE_VOLUME), made by the pool's
// reflink-or-copy engine. The new volume may be larger than its source:
// the image grows now, the filesystem at its first NodeStageVolume. p holds
// the validated parameters and capabilities.
func (s *ControllerService) createFromSource(ctx context.Context, st *poolStore, req *csipb.CreateVolumeRequest, p createParams) (*csipb.CreateVolumeResponse, error) {
	src, err := parseContentSource(req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	id := st.VolumeID(name)
	// The source's key too: a snapshot being deleted, or a volume being
	// unstaged while frozen, must wait for the clone.
	unlock, err := s.locks.tryLock(id, src.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	srcSize, srcFS, srcEnc, err := s.sourceInfo(st, src)
	if err != nil {
		return nil, err
	}
	if err := checkSourceEncryption(src, srcEnc, p); err != nil {
		return nil, err
	}
	// The data holds the source's filesystem: a request that names another
	// one cannot be honoured (spec: source incompatible → INVALID_ARGUMENT);
	// one that names none gets the source's.
	if explicitFSType(req) && p.fsType != srcFS && !p.block {
		return nil, invalidArgument("%s %s holds a %s filesystem; a volume made from it cannot be %s", src.Kind, src.ID, srcFS, p.fsType)
	}
	p.fsType = srcFS
	size, err := sizeFromSource(req.GetCapacityRange(), minSize(p), srcSize)
	if err != nil {
		return nil, err
	}
	if !p.block {
		size = fs.GrowTarget(p.fsType, srcSize, size, req.GetCapacityRange().GetLimitBytes())
	}
	vol, err := st.GetByName(name)
	switch {
	case err == nil:
		if err := compatible(vol, name, req, p); err != nil {
			return nil, err
		}
		return &csipb.CreateVolumeResponse{Volume: s.csiVolume(vol)}, nil
	case !errors.Is(err, volume.ErrNotFound):
		return nil, err
	}
	create := func() (err error) {
		vol, err = st.Create(ctx, volume.CreateRequest{
			Name: name, CapacityBytes: size, RequestedBytes: requested(req.GetCapacityRange()),
			FSType: p.fsType, Provisioning: p.provisioning,
			Parameters: req.GetParameters(), Source: &src, QoS: &p.qos, Secrets: req.GetSecrets(),
			Encryption: p.encryption,
		})
		return err
	}
	if src.Kind == volume.SourceVolume {
		err = s.withFrozen(ctx, st, src.ID, create)
	} else {
		err = create() // a snapshot's image never changes
	}
	if err != nil {
		return nil, err
	}
	klog.InfoS("volume created from source", "volumeID", vol.ID, "name", name, "source", src.Kind, "sourceID", src.ID,
		"bytes", size, "sourceBytes", srcSize, "fsType", p.fsType, "provisioning", p.provisioning)
	return &csipb.CreateVolumeResponse{Volume: s.csiVolume(vol)}, nil
}

// parseContentSource turns the CSI source into the pool's.
func parseContentSource(cs *csipb.VolumeContentSource) (volume.ContentSource, error) {
	switch {
	case cs.GetSnapshot() != nil:
		if cs.GetSnapshot().GetSnapshotId() == "" {
			return volume.ContentSource{}, invalidArgument("volume content source: snapshot ID is missing")
		}
		return volume.ContentSource{Kind: volume.SourceSnapshot, ID: cs.GetSnapshot().GetSnapshotId()}, nil
	case cs.GetVolume() != nil:
		if cs.GetVolume().GetVolumeId() == "" {
			return volume.ContentSource{}, invalidArgument("volume content source: volume ID is missing")
		}
		return volume.ContentSource{Kind: volume.SourceVolume, ID: cs.GetVolume().GetVolumeId()}, nil
	}
	return volume.ContentSource{}, invalidArgument("volume content source has neither a snapshot nor a volume")
}

// sourceInfo returns the size, filesystem type and encryption scheme ("":
// none) of a source, which must
// be in the store st of the new volume: the pool copies within itself. A
// source st does not hold is NOT_FOUND, with the reason that matters on a
// node-local pool: it may well exist, on another node.
func (s *ControllerService) sourceInfo(st *poolStore, src volume.ContentSource) (int64, string, string, error) {
	if src.Kind == volume.SourceSnapshot {
		snap, err := st.GetSnapshot(src.ID)
		if errors.Is(err, volume.ErrSnapshotNotFound) || errors.Is(err, volume.ErrInvalidID) {
			return 0, "", "", notFound("snapshot %q is not in the pool of node %s: filevol snapshots are node-local, restore it on the node that took it", truncate(src.ID), s.cfg.NodeID)
		}
		return snap.SizeBytes, snap.FSType, encryptionScheme(snap.Encryption), err
	}
	vol, err := st.Get(src.ID)
	if errors.Is(err, volume.ErrNotFound) || errors.Is(err, volume.ErrInvalidID) {
		return 0, "", "", notFound("volume %q is not in the pool of node %s: filevol volumes are node-local, clone it on the node that holds it", truncate(src.ID), s.cfg.NodeID)
	}
	return vol.CapacityBytes, vol.FSType, encryptionScheme(vol.Encryption), err
}

// sizeFromSource is volumeSize for a restore or clone: never smaller than
// the source (spec: OUT_OF_RANGE for a volume smaller than its snapshot),
// and the source's size when the request names none.
func sizeFromSource(cr *csipb.CapacityRange, minBytes, srcSize int64) (int64, error) {
	lim := cr.GetLimitBytes()
	if lim > 0 && lim < srcSize {
		return 0, outOfRange("limit_bytes %d is smaller than the source (%d bytes), which the new volume must hold", lim, srcSize)
	}
	if cr.GetRequiredBytes() == 0 {
		cr = &csipb.CapacityRange{RequiredBytes: srcSize, LimitBytes: lim}
	}
	return volumeSize(cr, max(minBytes, srcSize))
}

// explicitFSType reports whether the request names a filesystem (a
// parameter or a mount capability), rather than leaving the default.
func explicitFSType(req *csipb.CreateVolumeRequest) bool {
	if req.GetParameters()[ParamFSType] != "" {
		return true
	}
	for _, c := range req.GetVolumeCapabilities() {
		if c.GetMount().GetFsType() != "" {
			return true
		}
	}
	return false
}

// csiContentSource is the CSI form of a record's source (nil for none).
func csiContentSource(src *volume.ContentSource) *csipb.VolumeContentSource {
	switch {
	case src == nil:
		return nil
	case src.Kind == volume.SourceSnapshot:
		return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: src.ID}}}
	default:
		return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
			Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: src.ID}}}
	}
}

// sameContentSource compares a record's source with a request's.
func sameContentSource(rec *volume.ContentSource, cs *csipb.VolumeContentSource) bool {
	if rec == nil || cs == nil {
		return rec == nil && cs == nil
	}
	got, err := parseContentSource(cs)
	return err == nil && got == *rec
}
