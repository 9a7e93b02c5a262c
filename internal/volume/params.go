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
	// ParamPVName, ParamPVCName and ParamPVCNamespace are the
	// parameters external-provisioner adds with --extra-create-metadata:
	// the directory pool's subPathPattern reads them, the node view shows
	// them.
	ParamPVName       = "csi.storage.k8s.io/pv/name"
	ParamPVCName      = "csi.storage.k8s.io/pvc/name"
	ParamPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
)
