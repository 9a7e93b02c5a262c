package dirpool

import (
	"os"
	"path/filepath"
	"strings"
)

// Deleting reports whether volume id of the directory pool at dir is
// still being removed in the background: its subvolume (or directory) in
// the trash or taken from it to destroy, or the deep parts of a tree a
// plain pool moved to the top of the trash. It reads the pool as files,
// for tools outside the driver (make bench-tree-delete), and keeps the
// trash's layout this package's alone.
func Deleting(dir, id string) (bool, error) {
	for _, sub := range []string{trashDir, destroyingDir} {
		ents, err := os.ReadDir(filepath.Join(dir, metaDir, sub))
		if err != nil {
			return false, err
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), id+".") || strings.HasPrefix(e.Name(), deepPrefix) {
				return true, nil
			}
		}
	}
	return false, nil
}
