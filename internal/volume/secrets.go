package volume

import (
	"errors"
	"fmt"
)

// Secrets are the key material a CSI request carries in its secrets
// field (a StorageClass's provisioner, node-stage, node-publish or
// node-expand Secret, a VolumeSnapshotClass's snapshotter Secret). They
// reach the backend in its request and nowhere else: printed they show
// only how many there are, and they refuse to be marshalled, so no
// record that embeds a request by mistake can store them in clear.
type Secrets map[string]string

// String shows the number of secrets, never a key's value.
func (s Secrets) String() string { return fmt.Sprintf("<%d secret(s), redacted>", len(s)) }

// GoString is String, for %#v.
func (s Secrets) GoString() string { return s.String() }

// MarshalJSON refuses: a record must never hold a request's secrets (a
// bug that tried would fail its write, not store them).
func (s Secrets) MarshalJSON() ([]byte, error) {
	return nil, errors.New("secrets are never marshalled or stored")
}
