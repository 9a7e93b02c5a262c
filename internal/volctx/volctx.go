// Package volctx owns the keys filevol puts in a volume's context
// (CreateVolumeResponse volume_context, which Kubernetes keeps in the PV's
// spec.csi.volumeAttributes): the driver writes them and `kubectl filevol
// doctor`, which reads only Kubernetes objects, reads them back. It
// imports nothing, so the plugin can use it on any OS.
package volctx

const (
	// SizeEnforced is "false" on a directory volume whose pool has no
	// quota (its class allowed an unenforced size), "true" on one whose
	// size a quota enforces.
	SizeEnforced = "filevol.csi.io/size-enforced"
	// SizeNote says, for a person, what an unenforced size means.
	SizeNote = "filevol.csi.io/size-note"
)
