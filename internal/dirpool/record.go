package dirpool

import (
	"time"

	"github.com/filevol/filevol/internal/volume"
)

// Volume is the record of a directory volume.
type Volume struct {
	Version        int               `json:"version"`
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	CapacityBytes  int64             `json:"capacityBytes"`
	RequestedBytes int64             `json:"requestedBytes,omitempty"`
	Parameters     map[string]string `json:"parameters,omitempty"`
	// Path is the subvolume's path relative to the pool's root.
	Path string `json:"path"`
	// Subvolume is its btrfs subvolume ID (qgroup 0/Subvolume): checked
	// before every operation on Path, so that a directory that replaced
	// the volume is never taken for it.
	Subvolume uint64 `json:"subvolume"`
	// Group: the limit is on the level-1 qgroup 1/Group, which holds the
	// subvolume and every subvolume a pod makes inside it (qgroup.go); 0:
	// on 0/Subvolume (full qgroups).
	Group uint64 `json:"qgroup,omitempty"`
	// Inode identifies the directory of a volume of a plain pool (no
	// subvolume), and Unenforced says that its size is not (plain.go).
	Inode      uint64 `json:"inode,omitempty"`
	Unenforced bool   `json:"sizeUnenforced,omitempty"`
	UID        uint32 `json:"uid"`
	GID        uint32 `json:"gid"`
	// GIDAllocated: GID came from the range and is the pool's to hand
	// out again once the volume is gone.
	GIDAllocated  bool                  `json:"gidAllocated,omitempty"`
	Mode          uint32                `json:"mode"`
	ContentSource *volume.ContentSource `json:"contentSource,omitempty"`
	Node          string                `json:"node"`
	CreatedAt     time.Time             `json:"createdAt"`
}

// RecordID and RecordVersion make Volume a recordstore.Record.
func (v Volume) RecordID() string   { return v.ID }
func (v Volume) RecordVersion() int { return v.Version }

// common is what the services see of a directory volume. FSType is empty:
// the volume is a directory of the pool's filesystem.
func (v Volume) common() volume.Volume {
	return volume.Volume{Version: v.Version, ID: v.ID, Name: v.Name, CapacityBytes: v.CapacityBytes,
		RequestedBytes: v.RequestedBytes, Parameters: v.Parameters, Node: v.Node,
		ContentSource: v.ContentSource, CreatedAt: v.CreatedAt, Context: v.context()}
}

// context is the volume context CreateVolume returns: how the size is held.
func (v Volume) context() map[string]string {
	if v.Unenforced {
		return map[string]string{ContextSizeEnforced: "false", ContextSizeNote: v.sizeNote()}
	}
	return map[string]string{ContextSizeEnforced: "true"}
}
