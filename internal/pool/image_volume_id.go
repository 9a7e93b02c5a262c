package pool

import "path/filepath"

// ImageVolumeID returns the ID of the volume whose image, or temporary image
// (of any owner of a shared pool), is backing, a file directly in the
// pool's volumes directory volumesDir (both as the caller sees them; the
// kernel reports paths with symlinks resolved). It reads the pool's own
// file names (ImageFileID); a name that is not a valid volume ID
// (ValidID) is no volume's.
func ImageVolumeID(volumesDir, backing string) (string, bool) {
	if filepath.Dir(filepath.Clean(backing)) != filepath.Clean(volumesDir) {
		return "", false
	}
	id, _, ok := ImageFileID(filepath.Base(backing), ValidID)
	return id, ok
}
