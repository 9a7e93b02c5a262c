package keywrap

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// The fields of the Secret (CSI secrets: the node-stage and provisioner
// Secrets of the StorageClass) that hold key material.
const (
	// SecretKey is the current key material.
	SecretKey = "encryptionKey"
	// SecretPreviousKey is the material being rotated away from: a volume
	// still wrapped under it opens, and is rewrapped under SecretKey.
	SecretPreviousKey = "previousEncryptionKey"
)

// Bounds of key material, in bytes.
const (
	MinMaterial = 32
	MaxMaterial = 1024
)

// ErrNoKey: the Secret has no SecretKey field (or no Secret reached the driver).
var ErrNoKey = fmt.Errorf("keywrap: no %q in the Secret (is the StorageClass's node-stage or provisioner Secret set?)", SecretKey)

// CheckMaterial refuses key material that is too short to be a random key,
// too long to be one, or not text (a CSI secret is a string: bytes that
// are not UTF-8 do not reach the driver intact).
func CheckMaterial(m []byte) error {
	switch {
	case len(m) == 0:
		return errors.New("keywrap: the key is empty")
	case len(m) < MinMaterial:
		return fmt.Errorf("keywrap: the key has %d bytes; at least %d random bytes are needed (head -c 32 /dev/urandom | base64)", len(m), MinMaterial)
	case len(m) > MaxMaterial:
		return fmt.Errorf("keywrap: the key has %d bytes; at most %d", len(m), MaxMaterial)
	case !utf8.Valid(m):
		return errors.New("keywrap: the key is not UTF-8 text; store it encoded (base64)")
	}
	return nil
}

// Materials is the key material of a Secret: the current one and, during
// a rotation, the previous one.
type Materials struct {
	Current, Previous []byte
}

// String never shows the material.
func (Materials) String() string { return "<key material, redacted>" }

// GoString is String, for %#v.
func (m Materials) GoString() string { return m.String() }

// FromSecret reads the material of a CSI secrets map. Errors name the
// field, never its value.
func FromSecret(secrets map[string]string) (Materials, error) {
	cur, ok := secrets[SecretKey]
	if !ok {
		return Materials{}, ErrNoKey
	}
	m := Materials{Current: []byte(cur)}
	if err := CheckMaterial(m.Current); err != nil {
		return Materials{}, fmt.Errorf("%s: %w", SecretKey, err)
	}
	if prev, ok := secrets[SecretPreviousKey]; ok {
		m.Previous = []byte(prev)
		if err := CheckMaterial(m.Previous); err != nil {
			return Materials{}, fmt.Errorf("%s: %w", SecretPreviousKey, err)
		}
	}
	return m, nil
}

// Open returns the data key wrapped in w: with the current
// material, else with the previous one, and then also w rewrapped under
// the current material, for the caller to keep in place of w (a rotation
// completes volume by volume, as each is opened). rewrapped is nil when
// the current material opened it.
func (m Materials) Open(w Wrapped) (dataKey []byte, rewrapped *Wrapped, err error) {
	key, err := Unwrap(m.Current, w)
	if !errors.Is(err, ErrWrongKey) || m.Previous == nil {
		return key, nil, err
	}
	key, perr := Unwrap(m.Previous, w)
	if errors.Is(perr, ErrWrongKey) {
		return nil, nil, fmt.Errorf("%w (neither %s nor %s)", ErrWrongKey, SecretKey, SecretPreviousKey)
	}
	if perr != nil {
		return nil, nil, perr
	}
	nw, err := Wrap(m.Current, w.KeyName, key)
	if err != nil {
		clear(key)
		return nil, nil, err
	}
	return key, &nw, nil
}
