package csi

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/volume"
)

// ParamEncryption asks for a volume encrypted at rest: "fscrypt", the one
// scheme (the kernel's fscrypt on the volume's ext4, its data key wrapped
// under the node-stage Secret's encryptionKey).
const ParamEncryption = volume.ParamEncryption

// noDMCrypt is why block volumes, and filesystems fscrypt cannot encrypt,
// are refused: the scheme that would cover them is dm-crypt (LUKS), which
// the kernels filevol runs on lack.
const noDMCrypt = "encrypting a whole device (LUKS) needs the kernel's dm-crypt, which this kernel lacks"

// parseEncryption validates the value of ParamEncryption.
func parseEncryption(v string) (string, error) {
	if v != volume.EncryptionFscrypt {
		return "", invalidArgument("parameter %s=%q: the one scheme is %q (fscrypt on an ext4 filesystem); leave it out for a volume in clear",
			ParamEncryption, v, volume.EncryptionFscrypt)
	}
	return v, nil
}

// checkEncryptedAccess refuses what an encrypted volume cannot be:
// fscrypt encrypts files and directories of an ext4, so the volume must
// be an ext4 mounted as a filesystem.
func checkEncryptedAccess(caps []*csipb.VolumeCapability, p createParams) error {
	if p.encryption == "" {
		return nil
	}
	for _, c := range caps {
		if c.GetBlock() != nil {
			return invalidArgument("%s=%s encrypts the files of an ext4 filesystem: a volume with block access cannot be encrypted (%s)",
				ParamEncryption, p.encryption, noDMCrypt)
		}
	}
	if p.fsType != "ext4" {
		return invalidArgument("%s=%s needs an ext4 filesystem, not %s: fscrypt cannot encrypt %s here (xfs has no fscrypt at all; btrfs has none in this kernel), and %s",
			ParamEncryption, p.encryption, p.fsType, p.fsType, noDMCrypt)
	}
	return nil
}

// checkSourceEncryption refuses a restore or clone that would change
// whether the data is encrypted: the new volume holds the source's bytes
// as they are, under the source's data key.
func checkSourceEncryption(src volume.ContentSource, srcScheme string, p createParams) error {
	switch {
	case srcScheme == p.encryption:
		return nil
	case p.encryption == "":
		return invalidArgument("%s %s is encrypted (%s=%s): a volume made from it holds the same encrypted data, so its class must set %s=%s too "+
			"(its node-stage Secret must hold the source's key, as encryptionKey or previousEncryptionKey)",
			src.Kind, src.ID, ParamEncryption, srcScheme, ParamEncryption, srcScheme)
	default:
		return invalidArgument("%s %s is not encrypted: a volume made from it in a class with %s=%s would keep the source's data in clear; "+
			"make an empty encrypted volume and copy the data into it instead", src.Kind, src.ID, ParamEncryption, p.encryption)
	}
}

// encryptionScheme is a record's scheme, "" when it is not encrypted.
func encryptionScheme(e *volume.Encryption) string {
	if e == nil {
		return ""
	}
	return e.Scheme
}
