package volume

import "time"

// GCReport is what one garbage-collection sweep found and did.
type GCReport struct {
	// DetachedLoops are loop devices backed by pool images that nothing
	// used (no mount, no bind, so neither staged nor published): debris of
	// a crash between attach and mount. Certain garbage: detached.
	DetachedLoops []string
	// Quarantined are volume IDs whose image had no record: moved to the
	// pool's quarantine, never deleted (they might hold data).
	Quarantined []string
	// RecordsWithoutImage are volumes whose data is gone (reported).
	RecordsWithoutImage []string
	// TempFiles are in-flight or crashed operations' files (reported;
	// the pool removes crash debris when it opens).
	TempFiles []string
	// QuarantineFiles waiting for an operator.
	QuarantineFiles []string
	// GroupLeftovers are member snapshots of group snapshots never
	// committed, deleted (the image kind's collector).
	GroupLeftovers []string
	// Took is how long the sweep took (set by RunGC): it reads every loop
	// device, mount and pool file, so it grows with the node's volumes.
	Took time.Duration
}

// Orphans is the number of findings an operator should look at.
func (r GCReport) Orphans() int {
	return len(r.RecordsWithoutImage) + len(r.QuarantineFiles)
}
