package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	idPrefix = "fv-"
	// idHexLen hex digits (128 bits of sha256) make collisions between
	// names practically impossible while keeping paths short.
	idHexLen = 32
	idLen    = len(idPrefix) + idHexLen
)

// volumeID derives the ID from the name alone, so a retried CreateVolume
// (CSI spec: MUST be idempotent by name) finds its record without a lookup
// table, and no name ever becomes a path.
func volumeID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return idPrefix + hex.EncodeToString(sum[:idHexLen/2])
}

// validID accepts exactly the shape volumeID makes. Anything else is
// refused before it can become a path ("..", "/", NUL cannot pass).
func validID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidID)
	case len(id) != idLen:
		return fmt.Errorf("%w: %s is %d bytes, want %d (%q and %d hex digits)",
			ErrInvalidID, quoteShort(id), len(id), idLen, idPrefix, idHexLen)
	case !strings.HasPrefix(id, idPrefix):
		return fmt.Errorf("%w: %s does not start with %q", ErrInvalidID, quoteShort(id), idPrefix)
	}
	for i := len(idPrefix); i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%w: %s has %q at byte %d, want a lowercase hex digit",
				ErrInvalidID, quoteShort(id), c, i)
		}
	}
	return nil
}

// validName bounds what a record may hold. Names are otherwise free-form
// (Kubernetes sends "pvc-<uuid>", other COs anything), since only their hash
// becomes a path.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: volume name is empty", ErrInvalidID)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: volume name %s is %d bytes, longer than %d",
			ErrInvalidID, quoteShort(name), len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: volume name %s is not valid UTF-8", ErrInvalidID, quoteShort(name))
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: volume name %s contains NUL", ErrInvalidID, quoteShort(name))
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
