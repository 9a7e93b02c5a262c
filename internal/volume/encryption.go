package volume

import "github.com/filevol/filevol/internal/keywrap"

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

// Encrypted reports whether the volume's data is encrypted at rest.
func (v Volume) Encrypted() bool { return v.Encryption != nil }
