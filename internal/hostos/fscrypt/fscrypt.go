// Package fscrypt is filevol's one owner of filesystem encryption (the
// kernel's fscrypt, v2 policies; ext4 with the encrypt feature here): it
// adds a key to a filesystem's keyring, removes it, reports its status,
// and sets or reads a directory's encryption policy, each through one
// ioctl on a file of that filesystem.
//
// Keys are 64 raw bytes (what AES-256-XTS needs; the kernel derives the
// per-file keys from them). The kernel names a key by a 16-byte
// identifier it derives from the key itself (HKDF-SHA512), so the same
// key always has the same identifier and an identifier reveals nothing of
// the key. While a key is in the filesystem's keyring, every encrypted
// file under a policy naming it reads in clear to anyone with permission;
// once it is removed, their contents and names are ciphertext, even to
// root. A key is added and removed per filesystem, not per process.
//
// Keys is the seam: OS is the kernel, package fake has a stateful double.
package fscrypt

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// KeySize is the size of every key filevol adds, in bytes.
const KeySize = 64

// KeyID is the kernel's identifier of a key (FSCRYPT_KEY_IDENTIFIER_SIZE).
type KeyID [16]byte

// String is the identifier in hex, as fscryptctl and the kernel's logs show it.
func (k KeyID) String() string { return hex.EncodeToString(k[:]) }

// Status of a key in a filesystem's keyring.
type Status int

const (
	// Absent: not in the keyring; encrypted files under it are ciphertext.
	Absent Status = iota + 1
	// Present: in the keyring; its files read in clear.
	Present
	// IncompletelyRemoved: removed, but files under it were still open;
	// their contents stay readable until they are closed (a second Remove
	// finishes the removal once they are).
	IncompletelyRemoved
)

func (s Status) String() string {
	switch s {
	case Absent:
		return "absent"
	case Present:
		return "present"
	case IncompletelyRemoved:
		return "incompletely removed"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

var (
	// ErrKeySize: a key that is not KeySize bytes.
	ErrKeySize = fmt.Errorf("fscrypt: a key must be %d bytes", KeySize)
	// ErrNotSupported: the filesystem cannot encrypt (ext4 without the
	// encrypt feature, xfs, btrfs on this kernel, a kernel without fscrypt).
	ErrNotSupported = errors.New("fscrypt: the filesystem does not support encryption")
	// ErrOtherPolicy: the directory is encrypted already, under another key.
	ErrOtherPolicy = errors.New("fscrypt: the directory is encrypted under another key")
	// ErrNotEmpty: a policy can only be set on an empty directory.
	ErrNotEmpty = errors.New("fscrypt: the directory is not empty")
)

// Keys adds and removes keys and sets and reads policies. mountPoint is
// any path on the filesystem whose keyring is meant (its root, usually).
type Keys interface {
	// Add puts key in the filesystem's keyring and returns its identifier.
	// Adding a key that is there already is no error (the kernel counts
	// the adds; Remove undoes them all for root).
	Add(mountPoint string, key []byte) (KeyID, error)
	// Remove takes the key out of the keyring, for every user. It returns
	// IncompletelyRemoved when files under it are still open (their
	// contents stay readable until they are closed), Absent when it is
	// gone; a key that was not there is Absent and no error.
	Remove(mountPoint string, id KeyID) (Status, error)
	// Status is the key's status in the keyring.
	Status(mountPoint string, id KeyID) (Status, error)
	// SetPolicy encrypts the empty directory dir (and all made beneath it)
	// under the key id, which must be in the keyring. A directory already
	// under that key is no error; under another, ErrOtherPolicy.
	SetPolicy(dir string, id KeyID) error
	// Policy is the key dir is encrypted under; ok is false for a
	// directory that is not encrypted.
	Policy(dir string) (id KeyID, ok bool, err error)
}

// CheckKey refuses keys of any size but KeySize, before any system call
// (the fake applies the same rule).
func CheckKey(key []byte) error {
	if len(key) != KeySize {
		return fmt.Errorf("%w (got %d)", ErrKeySize, len(key))
	}
	return nil
}
