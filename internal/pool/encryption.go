package pool

import (
	"fmt"
	"reflect"

	"github.com/filevol/filevol/internal/keywrap"
)

// EncryptionFscrypt is the one encryption scheme: the kernel's fscrypt on
// the volume's ext4 (made with the encrypt feature), every file a pod can
// reach under one directory encrypted with the volume's data key.
const EncryptionFscrypt = "fscrypt"

// Encryption says that a volume's data is encrypted at rest, and keeps
// its data key, wrapped (package keywrap): the record never holds a key in
// clear, nor the Secret's material that wraps it.
type Encryption struct {
	// Scheme is EncryptionFscrypt.
	Scheme string `json:"scheme"`
	// Wrapped is the volume's data key; nil until its first stage makes
	// it (a blank volume holds nothing to encrypt before then).
	Wrapped *keywrap.Wrapped `json:"wrapped,omitempty"`
}

// clone copies e, so a record never aliases another's key.
func (e *Encryption) clone() *Encryption {
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

// scheme is e's scheme, "" for a volume that is not encrypted.
func (e *Encryption) scheme() string {
	if e == nil {
		return ""
	}
	return e.Scheme
}

// Encrypted reports whether the volume's data is encrypted at rest.
func (v Volume) Encrypted() bool { return v.Encryption != nil }

// checkEncryption refuses a scheme the pool does not know.
func checkEncryption(scheme string) error {
	if scheme != "" && scheme != EncryptionFscrypt {
		return fmt.Errorf("%w: encryption %s, want %q", ErrInvalidArgument, quoteShort(scheme), EncryptionFscrypt)
	}
	return nil
}

// sourceEncryption checks that a volume asking for scheme may be made
// from a source encrypted as enc: the copy holds the source's data as it
// is, so both are encrypted the same way or neither is.
func sourceEncryption(src *ContentSource, enc *Encryption, scheme string) error {
	switch have := enc.scheme(); {
	case have == scheme:
		return nil
	case scheme == "":
		return fmt.Errorf("%w: %s %s is encrypted (%s): a volume made from it must be encrypted too", ErrInvalidArgument, src.Kind, src.ID, have)
	default:
		return fmt.Errorf("%w: %s %s is not encrypted: a volume made from it cannot be encrypted (%s), since its data would stay in clear", ErrInvalidArgument, src.Kind, src.ID, scheme)
	}
}

// SetWrappedKey records w as the volume's wrapped data key, in one
// atomic, durable rewrite of its record: at the volume's first stage,
// before anything is encrypted with the key, and after a rotation
// rewrapped it. The same w again writes nothing. A volume that is not
// encrypted is ErrInvalidArgument; a key of another name than the one
// recorded is refused, since it could not decrypt what the first one
// encrypted. The caller holds the volume's lock.
func (p *Pool) SetWrappedKey(id string, w keywrap.Wrapped) (Volume, error) {
	v, err := p.get(id)
	if err != nil {
		return Volume{}, err
	}
	switch {
	case v.Encryption == nil:
		return Volume{}, fmt.Errorf("%w: volume %s is not encrypted: it has no data key to record", ErrInvalidArgument, id)
	case v.Encryption.Wrapped != nil && v.Encryption.Wrapped.KeyName != w.KeyName:
		return Volume{}, fmt.Errorf("volume %s: its data key is %s; refusing to record another one (%s) in its place", id, v.Encryption.Wrapped.KeyName, w.KeyName)
	case v.Encryption.Wrapped != nil && reflect.DeepEqual(*v.Encryption.Wrapped, w):
		return v, nil
	}
	v.Encryption = v.Encryption.clone()
	v.Encryption.Wrapped = &w
	if err := p.vols.Replace(v); err != nil {
		return Volume{}, fmt.Errorf("record the data key of volume %s: %w", id, err)
	}
	return v, nil
}
