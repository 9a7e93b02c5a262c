package csi

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/volume"
)

// StorageClass parameters filevol understands.
const (
	// ParamFSType is set by Kubernetes from the StorageClass; the
	// external-provisioner usually moves it into the volume capability.
	ParamFSType = "csi.storage.k8s.io/fstype"
	// ParamProvisioning is "thin" (sparse, default) or "thick" (fallocated).
	ParamProvisioning = "provisioning"
	// kubernetesMetaPrefix marks the PV/PVC metadata the provisioner adds
	// with --extra-create-metadata; kept in the record, never interpreted.
	kubernetesMetaPrefix = "csi.storage.k8s.io/"
)

const (
	// allocationUnit: every size is rounded up to whole MiB, which every
	// filesystem and the loop driver accept.
	allocationUnit = volume.AllocationUnit
	// defaultVolumeSize when the CO gives no capacity range (spec: the
	// plugin MAY choose).
	defaultVolumeSize = 1 << 30
	// maxVolumeSize keeps every size computation far from overflow (8 EiB/2).
	maxVolumeSize = math.MaxInt64 / 2
	// maxPathLen bounds staging and target paths (PATH_MAX).
	maxPathLen = 4096
	// maxNameLen bounds CreateVolume/CreateSnapshot names; the CSI spec
	// requires at least 128 bytes be supported.
	maxNameLen = 1024
)

// createParams are the validated parameters of a CreateVolume request.
type createParams struct {
	fsType       string
	provisioning string
	block        bool // only block access was requested
	// qos are the I/O limits the parameters set (qos_params.go).
	qos volume.QoS
	// mode is the provisioningMode asked for: the kind of volume ("" for
	// an image), whose store validates the parameters of a kind of its own
	// (parameterChecker) once CreateVolume has chosen it.
	mode string
	// encryption is the scheme of ParamEncryption, "" for none.
	encryption string
}

// parseParameters validates StorageClass parameters; an unknown one is an
// INVALID_ARGUMENT that names it and lists what is accepted.
func parseParameters(params map[string]string) (createParams, error) {
	if mode, ok := params[volume.ParamProvisioningMode]; ok && mode != "" {
		// Encryption is of the filesystems filevol makes, the image kind's
		// (the default): another kind's volumes live in a filesystem
		// filevol neither formats nor holds the keys of.
		if _, ok := params[ParamEncryption]; ok {
			return createParams{}, invalidArgument("parameter %s: %s volumes (%s=%s) cannot be encrypted: their files are in the pool's own filesystem, "+
				"which filevol neither formats nor holds the keys of; use an image volume (leave %s out) with %s=%s",
				ParamEncryption, mode, volume.ParamProvisioningMode, mode, volume.ParamProvisioningMode, ParamEncryption, volume.EncryptionFscrypt)
		}
		return createParams{mode: mode}, nil
	}
	p := createParams{provisioning: "thin"}
	for k, v := range params {
		switch {
		case k == ParamFSType:
			p.fsType = strings.ToLower(v)
		case k == ParamProvisioning:
			if v != "thin" && v != "thick" {
				return p, invalidArgument("parameter %s=%q: must be thin or thick", k, v)
			}
			p.provisioning = v
		case isQoSParam(k):
			if err := setQoSParam(&p.qos, k, v); err != nil {
				return p, err
			}
		case k == ParamEncryption:
			var err error
			if p.encryption, err = parseEncryption(v); err != nil {
				return p, err
			}
		case strings.HasPrefix(k, kubernetesMetaPrefix+"pv/"), strings.HasPrefix(k, kubernetesMetaPrefix+"pvc/"):
		default:
			return p, invalidArgument("unknown parameter %q (filevol accepts %s, %s, %s and %s, or %s=%s and the directory volume's parameters)",
				k, ParamFSType, ParamProvisioning, ParamEncryption, strings.Join(qosParams, ", "), volume.ParamProvisioningMode, volume.ProvisioningModeDirectory)
		}
	}
	if p.fsType != "" && !supportedFS(p.fsType) {
		return p, invalidArgument("parameter %s=%q: supported filesystems are %s", ParamFSType, p.fsType, strings.Join(fs.Types, ", "))
	}
	return p, nil
}

func supportedFS(t string) bool {
	return slices.Contains(fs.Types, t)
}

// accessModes filevol can honour: every volume lives on one node.
var accessModes = map[csipb.VolumeCapability_AccessMode_Mode]bool{
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
	csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
	// Directory volumes of a shared pool only (checkCapabilities).
	csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER: true,
	csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:  true,
}

// checkCapability validates one capability and returns the fs type it asks
// for ("" when none or block).
func checkCapability(c *csipb.VolumeCapability) (string, error) {
	if c == nil {
		return "", invalidArgument("volume capability is missing")
	}
	am := c.GetAccessMode()
	if am == nil {
		return "", invalidArgument("volume capability has no access mode")
	}
	if !accessModes[am.GetMode()] {
		return "", invalidArgument("access mode %s is not supported: filevol volumes live on a single node", am.GetMode())
	}
	switch t := c.GetAccessType().(type) {
	case *csipb.VolumeCapability_Block:
		return "", nil
	case *csipb.VolumeCapability_Mount:
		fsType := strings.ToLower(t.Mount.GetFsType())
		if fsType != "" && !supportedFS(fsType) {
			return "", invalidArgument("filesystem %q is not supported (supported: %s)", fsType, strings.Join(fs.Types, ", "))
		}
		if err := checkMountFlags(t.Mount.GetMountFlags()); err != nil {
			return "", err
		}
		return fsType, nil
	default:
		return "", invalidArgument("volume capability has neither block nor mount access type")
	}
}

// checkCapabilities validates a CreateVolume capability list against what
// the chosen kind offers (t) and merges it with the fstype parameter: for
// a kind whose filesystem the CO chooses, the fs type is whatever the
// capabilities and parameters agree on, ext4 by default.
func checkCapabilities(caps []*csipb.VolumeCapability, p *createParams, t volume.Traits, shared bool) error {
	if len(caps) == 0 {
		return invalidArgument("volume capabilities are missing")
	}
	blockOnly := true
	for _, c := range caps {
		if err := checkAccessMode(c, t, shared); err != nil {
			return err
		}
		fsType, err := checkCapability(c)
		if err != nil {
			return err
		}
		if c.GetBlock() != nil && !t.Block {
			return invalidArgument("a %s has no block access: ask for mount access", t.Noun)
		}
		if fsType != "" && !t.FSType {
			return invalidArgument("a %s is a part of the pool's filesystem: filesystem type %q cannot be chosen", t.Noun, fsType)
		}
		if c.GetMount() != nil {
			blockOnly = false
		}
		if fsType == "" {
			continue
		}
		if p.fsType != "" && p.fsType != fsType {
			return invalidArgument("filesystem %q of a volume capability conflicts with %q requested elsewhere", fsType, p.fsType)
		}
		p.fsType = fsType
	}
	p.block = blockOnly
	if t.FSType && p.fsType == "" {
		p.fsType = "ext4"
	}
	return nil
}

// checkAccessMode refuses an access mode the kind cannot honour. A kind
// published on several nodes (a directory volume) offers, on a shared
// pool (--pool-shared: every node mounts it), MULTI_NODE_MULTI_WRITER and
// MULTI_NODE_READER_ONLY, which a bind mount on each node gives; on a
// node-local pool SINGLE_NODE_* only. MULTI_NODE_SINGLE_WRITER is never
// offered: nothing would stop a second node's bind from writing.
func checkAccessMode(c *csipb.VolumeCapability, t volume.Traits, shared bool) error {
	m := c.GetAccessMode().GetMode()
	switch {
	case !multiNode(c):
		return nil
	case !t.MultiNode:
		return errImageSingleNode(c)
	case m == csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:
		return invalidArgument("access mode %s is not offered for %ss: every node's bind of the volume could write; "+
			"ask for MULTI_NODE_MULTI_WRITER or MULTI_NODE_READER_ONLY", m, t.Noun)
	case !shared:
		return invalidArgument("access mode %s: this pool of %ss is node-local (on one node's disk), so its volumes are SINGLE_NODE_* only; "+
			"MULTI_NODE_* needs a pool that every node mounts, served with --pool-shared", m, t.Noun)
	}
	return nil
}

// errImageSingleNode refuses a MULTI_NODE_* access mode for an image
// volume: its filesystem is mounted by one kernel at a time.
func errImageSingleNode(c *csipb.VolumeCapability) error {
	return invalidArgument("access mode %s is not supported for image volumes: their filesystem is mounted on a single node "+
		"(MULTI_NODE_* is for directory volumes, provisioningMode: directory, of a pool every node mounts)", c.GetAccessMode().GetMode())
}

// volumeSize turns a capacity range into the size to allocate, following
// the spec: at least required_bytes, at most limit_bytes, rounded up to the
// allocation unit and to the filesystem's minimum.
func volumeSize(cr *csipb.CapacityRange, minBytes int64) (int64, error) {
	req, lim := cr.GetRequiredBytes(), cr.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, invalidArgument("capacity range must not be negative (required_bytes=%d, limit_bytes=%d)", req, lim)
	}
	if lim > 0 && req > lim {
		return 0, outOfRange("required_bytes %d is larger than limit_bytes %d", req, lim)
	}
	if req > maxVolumeSize {
		return 0, outOfRange("required_bytes %d is larger than the largest volume filevol makes (%d)", req, int64(maxVolumeSize))
	}
	size := req
	if size == 0 {
		size = defaultVolumeSize
		if lim > 0 && lim < size {
			// The largest whole unit under the limit; a limit below one unit
			// leaves none, and the check below says so (OUT_OF_RANGE).
			size = max(lim/allocationUnit*allocationUnit, allocationUnit)
		}
	}
	size = max(roundUp(size, allocationUnit), roundUp(minBytes, allocationUnit))
	if lim > 0 && size > lim {
		return 0, outOfRange("no size fits the range: at least %d bytes are needed (minimum %d, allocation unit %d) but limit_bytes is %d", size, minBytes, allocationUnit, lim)
	}
	return size, nil
}

// requested is what the record keeps of a create's request: required_bytes
// in whole allocation units (0 when none: the volume's capacity).
func requested(cr *csipb.CapacityRange) int64 {
	return roundUp(cr.GetRequiredBytes(), allocationUnit)
}

func roundUp(n, unit int64) int64 { return (n + unit - 1) / unit * unit }

// minSize is the smallest volume for the requested use.
func minSize(p createParams) int64 {
	if p.block {
		return allocationUnit
	}
	return fs.MinSize[p.fsType]
}

// checkName validates a CreateVolume/CreateSnapshot name. Names never
// become paths (IDs are hashes of them), but NUL and absurd lengths are refused.
func checkName(what, name string) error { return checkString(what+" name", name, maxNameLen) }

// checkString refuses a string from the CO that is empty, longer than max
// bytes or holds a NUL byte, naming it what.
func checkString(what, s string, max int) error {
	switch {
	case s == "":
		return invalidArgument("%s is missing", what)
	case len(s) > max:
		return invalidArgument("%s is %d bytes long; at most %d are allowed", what, len(s), max)
	case strings.ContainsRune(s, 0):
		return invalidArgument("%s contains a NUL byte", what)
	}
	return nil
}

// checkVolumeID validates the shape of a volume ID, of any kind, before
// it is routed (routes.go) and becomes a path. A malformed ID cannot name
// any volume: NOT_FOUND, as the spec asks for a volume that does not exist.
func checkVolumeID(id string) error {
	if id == "" {
		return invalidArgument("volume ID is missing")
	}
	if err := validVolumeID(id); err != nil {
		return notFound("volume %q does not exist: %v", truncate(id), err)
	}
	return nil
}

// checkPath validates a staging or target path from the CO.
func checkPath(what, p string) error {
	if err := checkString(what, p, maxPathLen); err != nil {
		return err
	}
	if !strings.HasPrefix(p, "/") {
		return invalidArgument("%s %q must be an absolute path", what, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return invalidArgument("%s %q must not contain \"..\"", what, p)
		}
	}
	return nil
}

// truncate keeps hostile IDs from flooding messages and logs.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// describeTopologies renders requisite topologies for an error message.
func describeTopologies(ts []*csipb.Topology) string {
	var out []string
	for _, t := range ts {
		var kv []string
		for k, v := range t.GetSegments() {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		out = append(out, "{"+strings.Join(kv, ",")+"}")
	}
	return fmt.Sprint(out)
}
