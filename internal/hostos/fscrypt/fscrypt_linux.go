package fscrypt

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OS is the kernel's fscrypt.
type OS struct{}

var _ Keys = OS{}

// The policy filevol sets: AES-256-XTS for contents, AES-256-CTS for
// names (the kernel's recommended pair where AES is the cipher there is),
// names padded to 32 bytes so their lengths say less.
var policyV2 = unix.FscryptPolicyV2{
	Version:                   unix.FSCRYPT_POLICY_V2,
	Contents_encryption_mode:  unix.FSCRYPT_MODE_AES_256_XTS,
	Filenames_encryption_mode: unix.FSCRYPT_MODE_AES_256_CTS,
	Flags:                     unix.FSCRYPT_POLICY_FLAGS_PAD_32,
}

// ioctl runs one fscrypt ioctl on a file opened at path (read-only: every
// one of them works on a read-only descriptor of a directory), retrying
// when a signal interrupts it.
func ioctl(path string, req uint, arg unsafe.Pointer) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(arg))
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOTTY:
			return fmt.Errorf("%s: %w (%w)", path, ErrNotSupported, errno)
		}
		return errno
	}
}

func identifierSpec(id KeyID) unix.FscryptKeySpecifier {
	s := unix.FscryptKeySpecifier{Type: unix.FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER}
	copy(s.U[:], id[:])
	return s
}

// Add puts key in the keyring of the filesystem at mountPoint.
func (OS) Add(mountPoint string, key []byte) (KeyID, error) {
	if err := CheckKey(key); err != nil {
		return KeyID{}, err
	}
	// The argument is the struct followed by the raw key.
	head := int(unsafe.Sizeof(unix.FscryptAddKeyArg{}))
	buf := make([]byte, head+KeySize)
	defer clear(buf) // the key's copy does not outlive the call
	arg := (*unix.FscryptAddKeyArg)(unsafe.Pointer(&buf[0]))
	arg.Key_spec.Type = unix.FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER
	arg.Raw_size = KeySize
	copy(buf[head:], key)
	if err := ioctl(mountPoint, unix.FS_IOC_ADD_ENCRYPTION_KEY, unsafe.Pointer(&buf[0])); err != nil {
		return KeyID{}, fmt.Errorf("fscrypt: add a key to %s: %w", mountPoint, err)
	}
	var id KeyID
	copy(id[:], arg.Key_spec.U[:len(id)])
	return id, nil
}

// Remove takes the key out of the keyring for every user.
func (OS) Remove(mountPoint string, id KeyID) (Status, error) {
	arg := unix.FscryptRemoveKeyArg{Key_spec: identifierSpec(id)}
	err := ioctl(mountPoint, unix.FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS, unsafe.Pointer(&arg))
	if errors.Is(err, unix.ENOKEY) {
		return Absent, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fscrypt: remove key %s from %s: %w", id, mountPoint, err)
	}
	if arg.Removal_status_flags&unix.FSCRYPT_KEY_REMOVAL_STATUS_FLAG_FILES_BUSY != 0 {
		return IncompletelyRemoved, nil
	}
	return Absent, nil
}

// Status is the key's status in the keyring of the filesystem at mountPoint.
func (OS) Status(mountPoint string, id KeyID) (Status, error) {
	arg := unix.FscryptGetKeyStatusArg{Key_spec: identifierSpec(id)}
	if err := ioctl(mountPoint, unix.FS_IOC_GET_ENCRYPTION_KEY_STATUS, unsafe.Pointer(&arg)); err != nil {
		return 0, fmt.Errorf("fscrypt: status of key %s on %s: %w", id, mountPoint, err)
	}
	switch arg.Status {
	case unix.FSCRYPT_KEY_STATUS_ABSENT:
		return Absent, nil
	case unix.FSCRYPT_KEY_STATUS_PRESENT:
		return Present, nil
	case unix.FSCRYPT_KEY_STATUS_INCOMPLETELY_REMOVED:
		return IncompletelyRemoved, nil
	}
	return 0, fmt.Errorf("fscrypt: key %s on %s: unknown status %d", id, mountPoint, arg.Status)
}

// SetPolicy encrypts the empty directory dir under the key id.
func (OS) SetPolicy(dir string, id KeyID) error {
	p := policyV2
	copy(p.Master_key_identifier[:], id[:])
	err := ioctl(dir, unix.FS_IOC_SET_ENCRYPTION_POLICY, unsafe.Pointer(&p))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		err = ErrOtherPolicy
	case errors.Is(err, unix.ENOTEMPTY):
		err = ErrNotEmpty
	case errors.Is(err, unix.ENOKEY):
		err = fmt.Errorf("key %s is not in the filesystem's keyring: %w", id, err)
	}
	return fmt.Errorf("fscrypt: encrypt %s: %w", dir, err)
}

// Policy is the key dir is encrypted under.
func (OS) Policy(dir string) (KeyID, bool, error) {
	arg := unix.FscryptGetPolicyExArg{Size: uint64(len(unix.FscryptGetPolicyExArg{}.Policy))}
	err := ioctl(dir, unix.FS_IOC_GET_ENCRYPTION_POLICY_EX, unsafe.Pointer(&arg))
	if errors.Is(err, unix.ENODATA) {
		return KeyID{}, false, nil
	}
	if err != nil {
		return KeyID{}, false, fmt.Errorf("fscrypt: policy of %s: %w", dir, err)
	}
	if arg.Policy[0] != unix.FSCRYPT_POLICY_V2 {
		return KeyID{}, false, fmt.Errorf("fscrypt: %s is encrypted with a version %d policy; filevol sets and reads version 2 only", dir, arg.Policy[0])
	}
	p := (*unix.FscryptPolicyV2)(unsafe.Pointer(&arg.Policy[0]))
	return KeyID(p.Master_key_identifier), true, nil
}
