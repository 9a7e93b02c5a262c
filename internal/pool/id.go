package pool

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// The IDs of the pool's records, of every version (internal/volid): only
// [a-z0-9-], so "..", "/" and NUL cannot pass before one becomes a path.
var (
	validID         = validBy(volid.ParseVolume)
	validSnapshotID = validBy(volid.ParseSnapshot)
	validGroupID    = validBy(volid.ParseGroupSnapshot)
)

// validBy is a record store's check of an ID by parse: an ID parse refuses
// is volume.ErrInvalidID, with parse's reason.
func validBy[T any](parse func(string) (T, error)) func(string) error {
	return func(id string) error {
		if _, err := parse(id); err != nil {
			return fmt.Errorf("%w: %w", volume.ErrInvalidID, err)
		}
		return nil
	}
}

// validName bounds what a record may hold. Names are otherwise free-form
// (Kubernetes sends "pvc-<uuid>", other COs anything), since only their hash
// becomes a path. A bad name is a bad argument (INVALID_ARGUMENT), not an
// unknown ID: it names no volume that could be found.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: name is empty", volume.ErrInvalidArgument)
	case len(name) > volume.MaxNameLen:
		return fmt.Errorf("%w: name %s is %d bytes, longer than %d",
			volume.ErrInvalidArgument, quoteShort(name), len(name), volume.MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name %s is not valid UTF-8", volume.ErrInvalidArgument, quoteShort(name))
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: name %s contains NUL", volume.ErrInvalidArgument, quoteShort(name))
	}
	return nil
}

// quoteShort quotes s for an error message, cut to keep messages readable
// when a client sends something huge.
func quoteShort(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
