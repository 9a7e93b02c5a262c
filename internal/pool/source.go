package pool

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/volume"
)

// Sentinel errors of snapshots, restores and clones; their class gives
// their gRPC code.
var (
	// ErrOtherNode: the record belongs to another node's pool. Images are
	// node-local: a clone or snapshot can only be cut where the data is
	// (CSI CreateVolume: a source incompatible is INVALID_ARGUMENT).
	ErrOtherNode = volume.NewError(volume.ClassInvalid, "belongs to another node")
)

// cloneSource copies src, so a record never aliases the caller's value.
func cloneSource(src *volume.ContentSource) *volume.ContentSource {
	if src == nil {
		return nil
	}
	c := *src
	return &c
}

// sourceImage checks a create's content source and returns the path of
// the image to clone ("" for none), and how the source is encrypted: it
// must be a snapshot or volume of this node's pool, with its image present
// and no larger than size.
func (p *Pool) sourceImage(src *volume.ContentSource, size int64) (string, *volume.Encryption, error) {
	if src == nil {
		return "", nil, nil
	}
	var path, node string
	var enc *volume.Encryption
	var vol volume.Volume // a source volume; the zero Volume for a snapshot
	switch src.Kind {
	case volume.SourceSnapshot:
		s, err := p.GetSnapshot(src.ID) // not a member of a group cut short
		if err != nil {
			return "", nil, err
		}
		path, node, enc = p.snapImagePath(s.ID), s.Node, s.Encryption
	case volume.SourceVolume:
		v, err := p.get(src.ID)
		if err != nil {
			return "", nil, err
		}
		vol, path, node, enc = v, p.imagePath(v.ID), v.Node, v.Encryption
	default:
		return "", nil, fmt.Errorf("%w: content source kind %s, want %q or %q",
			volume.ErrInvalidArgument, quoteShort(src.Kind), volume.SourceSnapshot, volume.SourceVolume)
	}
	if node != p.opts.NodeID {
		return "", nil, fmt.Errorf("%s %s %w %q, not to %q: clone or restore it on that node",
			src.Kind, src.ID, ErrOtherNode, node, p.opts.NodeID)
	}
	// A blank source volume not used yet is cloned as what it is: blank.
	// (A no-op for anything not pending, the zero Volume included.)
	if err := p.materialize(vol); err != nil {
		return "", nil, fmt.Errorf("volume %s: %w", vol.ID, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if err == unix.ENOENT {
			return "", nil, fmt.Errorf("%s %s: %w (%s)", src.Kind, src.ID, volume.ErrImageMissing, path)
		}
		return "", nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if size < st.Size {
		return "", nil, fmt.Errorf("%w: %d bytes is smaller than %s %s (%d bytes)",
			volume.ErrInvalidArgument, size, src.Kind, src.ID, st.Size)
	}
	return path, enc, nil
}
