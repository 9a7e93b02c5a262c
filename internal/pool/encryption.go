package pool

import (
	"fmt"
	"reflect"

	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/volume"
)

// cloneEncryption copies e, so a record never aliases another's key.
func cloneEncryption(e *volume.Encryption) *volume.Encryption {
	if e == nil {
		return nil
	}
	c := *e
	if e.Wrapped != nil {
		w := *e.Wrapped
		c.Wrapped = &w
	}
	return &c
}

// encryptionScheme is e's scheme, "" for a volume that is not encrypted.
func encryptionScheme(e *volume.Encryption) string {
	if e == nil {
		return ""
	}
	return e.Scheme
}

// checkEncryption refuses a scheme the pool does not know.
func checkEncryption(scheme string) error {
	if scheme != "" && scheme != volume.EncryptionFscrypt {
		return fmt.Errorf("%w: encryption %s, want %q", volume.ErrInvalidArgument, quoteShort(scheme), volume.EncryptionFscrypt)
	}
	return nil
}

// sourceEncryption checks that a volume asking for scheme may be made
// from a source encrypted as enc: the copy holds the source's data as it
// is, so both are encrypted the same way or neither is.
func sourceEncryption(src *volume.ContentSource, enc *volume.Encryption, scheme string) error {
	switch have := encryptionScheme(enc); {
	case have == scheme:
		return nil
	case scheme == "":
		return fmt.Errorf("%w: %s %s is encrypted (%s): a volume made from it must be encrypted too", volume.ErrInvalidArgument, src.Kind, src.ID, have)
	default:
		return fmt.Errorf("%w: %s %s is not encrypted: a volume made from it cannot be encrypted (%s), since its data would stay in clear", volume.ErrInvalidArgument, src.Kind, src.ID, scheme)
	}
}

// SetWrappedKey records w as the volume's wrapped data key, in one
// atomic, durable rewrite of its record: at the volume's first stage,
// before anything is encrypted with the key, and after a rotation
// rewrapped it. The same w again writes nothing. A volume that is not
// encrypted is ErrInvalidArgument; a key of another name than the one
// recorded is refused, since it could not decrypt what the first one
// encrypted. The caller holds the volume's lock.
func (p *Pool) SetWrappedKey(id string, w keywrap.Wrapped) (volume.Volume, error) {
	v, err := p.get(id)
	if err != nil {
		return volume.Volume{}, err
	}
	switch {
	case v.Encryption == nil:
		return volume.Volume{}, fmt.Errorf("%w: volume %s is not encrypted: it has no data key to record", volume.ErrInvalidArgument, id)
	case v.Encryption.Wrapped != nil && v.Encryption.Wrapped.KeyName != w.KeyName:
		return volume.Volume{}, fmt.Errorf("volume %s: its data key is %s; refusing to record another one (%s) in its place", id, v.Encryption.Wrapped.KeyName, w.KeyName)
	case v.Encryption.Wrapped != nil && reflect.DeepEqual(*v.Encryption.Wrapped, w):
		return v, nil
	}
	v.Encryption = cloneEncryption(v.Encryption)
	v.Encryption.Wrapped = &w
	if err := p.vols.Replace(v); err != nil {
		return volume.Volume{}, fmt.Errorf("record the data key of volume %s: %w", id, err)
	}
	return v, nil
}
