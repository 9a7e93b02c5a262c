package pool

import (
	"fmt"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// validSnapshotID accepts the snapshot IDs of every version (volid).
func validSnapshotID(id string) error {
	if _, err := volid.ParseSnapshot(id); err != nil {
		return fmt.Errorf("%w: %w", volume.ErrInvalidID, err)
	}
	return nil
}

func (p *Pool) snapImagePath(id string) string    { return imagePath(p.sdir, id) }
func (p *Pool) snapTmpImagePath(id string) string { return p.sdir + "/" + tmpImageName(id, p.tag) }
