package volume

import (
	"time"
)

// GroupSnapshot is the record of a group snapshot, groups/<id>.json. It
// is the group's commit point: its members are ordinary snapshots whose
// records name the group (Snapshot.GroupSnapshotID), cut while every
// member's filesystem was frozen at once, and a member is visible only
// while its group's record exists and no delete of it has begun. A group
// cut short by a crash — members without a record — is seen by nobody;
// the retried create removes those members and cuts them again, so all
// of a group's members always come from one freeze.
type GroupSnapshot struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Name is the CO's name (CreateVolumeGroupSnapshotRequest.name).
	Name string `json:"name"`
	// SourceVolumeIDs are the volumes, in the order the CO gave them;
	// SnapshotIDs[i] is the member cut from SourceVolumeIDs[i].
	SourceVolumeIDs []string          `json:"sourceVolumeIDs"`
	SnapshotIDs     []string          `json:"snapshotIDs"`
	Parameters      map[string]string `json:"parameters,omitempty"`
	// Node is the node whose pool holds the members.
	Node      string    `json:"node"`
	CreatedAt time.Time `json:"createdAt"`
	// Deleting: a delete has begun. The group and its members are gone
	// for every reader; a retried delete finishes from SnapshotIDs.
	Deleting bool `json:"deleting,omitempty"`
}

// RecordID is the group's ID (recordstore.Record).
func (g GroupSnapshot) RecordID() string { return g.ID }

// RecordVersion is the version of the group's record format.
func (g GroupSnapshot) RecordVersion() int { return g.Version }

// GroupMemberName is the snapshot name of the member of group groupID cut
// from volumeID: fixed by both, so a retried create finds the members an
// interrupted one left, and bounded (two IDs), whatever the CO's name.
func GroupMemberName(groupID, volumeID string) string {
	return "group/" + groupID + "/" + volumeID
}
