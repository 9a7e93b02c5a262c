package volume

// StorageClass parameters the services read before they know which kind
// a volume is of; every other parameter is the chosen kind's.
const (
	// ParamProvisioningMode chooses the kind of volume CreateVolume makes:
	// its value is a kind's Traits.ProvisioningMode (absent: the image
	// kind). EFS's name: provisioningMode: efs-ap.
	ParamProvisioningMode = "provisioningMode"
	// ProvisioningModeDirectory makes a directory volume
	// (internal/dirpool): the one value filevol knows today.
	ProvisioningModeDirectory = "directory"
	// ParamEncryption asks for a volume encrypted at rest, by scheme
	// (EncryptionFscrypt).
	ParamEncryption = "encryption"
)
