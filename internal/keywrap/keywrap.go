// Package keywrap is the envelope of an encrypted volume's key: every
// volume has its own random data key, which encrypts its data (the
// kernel's fscrypt does that part); a key-encryption key derived from the
// key material in a Kubernetes Secret only wraps the data key, and the
// wrapped key is kept with the volume. Rotating the Secret's key rewraps
// the data key, a few hundred bytes, and never touches the data.
//
// Wrapping is AES-256-GCM with the data key's name as associated data
// (a random name given to the key when it is made, kept with it: a clone
// or restore of an encrypted volume holds the same data, so it carries the
// same key and name; a wrapped key whose name was changed does not open).
// The
// key-encryption key comes from HKDF-SHA256 over the Secret's material
// with a random salt per wrap; a check value derived the same way (a
// different HKDF label) tells a wrong Secret from a damaged record
// without decrypting anything.
//
// HKDF is no password hash: the Secret's material must be random (32 or
// more bytes from a random source, as `head -c 32 /dev/urandom | base64`
// writes them), which CheckMaterial asks for by length.
//
// The package knows nothing of gRPC, CSI or pools.
package keywrap

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
)

// DataKeySize is the size of a volume's data key: what fscrypt's
// AES-256-XTS takes.
const DataKeySize = 64

// Version of the wrapping below; a record of another version is refused,
// never guessed at.
const Version = 1

const (
	saltSize  = 32
	checkSize = 16
	kekLabel  = "filevol keywrap v1: key-encryption key"
	chkLabel  = "filevol keywrap v1: key check"
)

var (
	// ErrWrongKey: the Secret's material is not the one the data key was
	// wrapped with.
	ErrWrongKey = errors.New("keywrap: the Secret's key is not the one this volume's key was wrapped with")
	// ErrDamaged: the key is the right one but the wrapped key does not
	// decrypt (changed on disk, or copied from another volume).
	ErrDamaged = errors.New("keywrap: the wrapped key is damaged")
)

// Wrapped is a data key wrapped for one volume, as kept in its record.
// It holds no key material in clear.
type Wrapped struct {
	Version int `json:"version"`
	// KeyName names the data key (NewKeyName); not secret.
	KeyName    string `json:"keyName"`
	Salt       []byte `json:"salt"`
	Check      string `json:"check"`
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ciphertext"`
}

// NewDataKey returns a fresh random data key.
func NewDataKey() ([]byte, error) {
	k := make([]byte, DataKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return k, nil
}

// NewKeyName returns a fresh name for a new data key.
func NewKeyName() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// derive returns the key-encryption key and the check value of material
// with salt.
func derive(material, salt []byte) (kek []byte, check string, err error) {
	kek, err = hkdf.Key(sha256.New, material, salt, kekLabel, 32)
	if err != nil {
		return nil, "", err
	}
	c, err := hkdf.Key(sha256.New, material, salt, chkLabel, checkSize)
	if err != nil {
		return nil, "", err
	}
	return kek, hex.EncodeToString(c), nil
}

func gcm(kek []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Wrap wraps dataKey, named keyName, under material.
func Wrap(material []byte, keyName string, dataKey []byte) (Wrapped, error) {
	if err := CheckMaterial(material); err != nil {
		return Wrapped{}, err
	}
	if len(dataKey) != DataKeySize {
		return Wrapped{}, fmt.Errorf("keywrap: a data key is %d bytes, not %d", DataKeySize, len(dataKey))
	}
	if keyName == "" {
		return Wrapped{}, errors.New("keywrap: a data key needs a name")
	}
	w := Wrapped{Version: Version, KeyName: keyName, Salt: make([]byte, saltSize)}
	if _, err := rand.Read(w.Salt); err != nil {
		return Wrapped{}, err
	}
	kek, check, err := derive(material, w.Salt)
	if err != nil {
		return Wrapped{}, err
	}
	defer clear(kek)
	aead, err := gcm(kek)
	if err != nil {
		return Wrapped{}, err
	}
	w.Check = check
	w.Nonce = make([]byte, aead.NonceSize())
	if _, err := rand.Read(w.Nonce); err != nil {
		return Wrapped{}, err
	}
	w.Ciphertext = aead.Seal(nil, w.Nonce, dataKey, []byte(keyName))
	return w, nil
}

// Unwrap returns the data key wrapped in w, with material: ErrWrongKey
// when material is not what w was wrapped with, ErrDamaged when it is but
// w does not decrypt (changed, or its name changed).
func Unwrap(material []byte, w Wrapped) ([]byte, error) {
	if err := CheckMaterial(material); err != nil {
		return nil, err
	}
	if w.Version != Version {
		return nil, fmt.Errorf("keywrap: a wrapped key of version %d; this filevol reads version %d", w.Version, Version)
	}
	if len(w.Salt) != saltSize {
		return nil, ErrDamaged
	}
	kek, check, err := derive(material, w.Salt)
	if err != nil {
		return nil, err
	}
	defer clear(kek)
	if subtle.ConstantTimeCompare([]byte(check), []byte(w.Check)) != 1 {
		return nil, ErrWrongKey
	}
	aead, err := gcm(kek)
	if err != nil {
		return nil, err
	}
	if len(w.Nonce) != aead.NonceSize() {
		return nil, ErrDamaged
	}
	key, err := aead.Open(nil, w.Nonce, w.Ciphertext, []byte(w.KeyName))
	if err != nil || len(key) != DataKeySize {
		return nil, ErrDamaged
	}
	return key, nil
}
