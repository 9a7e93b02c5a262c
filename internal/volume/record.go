package volume

// RecordID is the volume's ID: its record is volumes/<ID>.json
// (recordstore.Record).
func (v Volume) RecordID() string { return v.ID }

// RecordVersion is the version of the volume's record format.
func (v Volume) RecordVersion() int { return v.Version }

// RecordID is the snapshot's ID: its record is snapshots/<ID>.json
// (recordstore.Record).
func (s Snapshot) RecordID() string { return s.ID }

// RecordVersion is the version of the snapshot's record format.
func (s Snapshot) RecordVersion() int { return s.Version }

// RecordName is the CO's name of the volume, for the pool's logs.
func (v Volume) RecordName() string { return v.Name }

// RecordName is the CO's name of the snapshot, for the pool's logs.
func (s Snapshot) RecordName() string { return s.Name }
